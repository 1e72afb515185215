//! The kubelet (and the Job controller) for Jobs: each Job's pod template container runs on
//! the host as a process; the Job's status follows its exits, in the order the apiserver
//! accepts (`SuccessCriteriaMet` before `Complete`, `FailureTarget` before `Failed`,
//! `completionTime` only with `Complete`), honouring `backoffLimit` and `completions`.
//!
//! Each attempt is a Pod object as well (created by the "Job controller", its status written as
//! the kubelet would: `Pending` while its claims are not bound, `Running`, then `Succeeded` or
//! `Failed` with the container's exit code and termination message); the process output goes
//! to `VOLUME_DIR/_jobs/<namespace>/<job>/attempt-<n>.log`. Pod failure policy `FailJob` rules
//! on exit codes fail the Job at once, as the Job controller does.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolumeClaim, Pod, PodSpec, PodStatus, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use crate::context::Sim;
use crate::faults::{Fault, Step};
use crate::migration::{Child, Faults};
use crate::process::{self, PodFacts, Sources};
use crate::{Error, Result, clock};
use crate::{pods, storage};

/// What the sim makes of a Job it observes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// `spec.suspend: true`.
    Suspended,
    /// `Complete` or `Failed` is `True`.
    Finished,
    /// Needs (more) pods run.
    Runnable,
}

fn condition_true(status: &JobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Classifies a Job. Pure.
pub fn observe(job: &Job) -> JobState {
    let status = job.status.clone().unwrap_or_default();
    if condition_true(&status, "Complete") || condition_true(&status, "Failed") {
        return JobState::Finished;
    }
    if job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false) {
        return JobState::Suspended;
    }
    JobState::Runnable
}

/// How one pod attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    pub success: bool,
    /// A failure that must fail the Job at once (an injected permanent fault).
    pub terminal: bool,
    pub message: String,
    /// The container's exit code, when a process ran.
    pub code: Option<i32>,
    /// The container's name and the pod's, for the failure policy's message.
    pub container: String,
    pub pod: String,
}

/// What follows an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Every completion done.
    Complete,
    /// Run another pod, after `backoff` (real time, before speed scaling).
    RunAgain { backoff: Duration },
    /// The Job failed.
    Fail { reason: String, message: String },
}

/// The Job controller's pod-failure backoff: 10 s doubling, at most 6 min.
pub fn failure_backoff(failed: i32) -> Duration {
    let exp = u32::try_from((failed - 1).clamp(0, 6)).unwrap_or(0);
    Duration::from_secs(10 * 2u64.pow(exp)).min(Duration::from_secs(360))
}

/// The `FailJob` rule of the Job's pod failure policy that `exit` matches, by index: an
/// `onExitCodes` rule for its container (or any) whose `In`/`NotIn` list takes its non-zero
/// exit code; the first matching rule of any action decides (`onPodConditions` rules are not
/// simulated). Pure.
pub fn fail_job_rule(job: &Job, exit: &Exit) -> Option<usize> {
    let code = exit.code.filter(|c| *c != 0)?;
    let rules = job
        .spec
        .as_ref()?
        .pod_failure_policy
        .as_ref()?
        .rules
        .clone();
    for (i, r) in rules.iter().enumerate() {
        let Some(on) = &r.on_exit_codes else { continue };
        if on
            .container_name
            .as_deref()
            .is_some_and(|c| c != exit.container)
        {
            continue;
        }
        let listed = on.values.contains(&code);
        let hit = match on.operator.as_str() {
            "In" => listed,
            "NotIn" => !listed,
            _ => false,
        };
        if hit {
            return (r.action == "FailJob").then_some(i);
        }
    }
    None
}

/// Decides what follows an attempt, given the status *after* counting it. Pure.
pub fn after_exit(job: &Job, counted: &JobStatus, exit: &Exit) -> Next {
    let spec = job.spec.clone().unwrap_or_default();
    let completions = spec.completions.unwrap_or(1);
    let backoff_limit = spec.backoff_limit.unwrap_or(6);
    let succeeded = counted.succeeded.unwrap_or(0);
    let failed = counted.failed.unwrap_or(0);
    if exit.success {
        return if succeeded >= completions {
            Next::Complete
        } else {
            Next::RunAgain {
                backoff: Duration::ZERO,
            }
        };
    }
    if exit.terminal {
        return Next::Fail {
            reason: "PodFailurePolicy".into(),
            message: exit.message.clone(),
        };
    }
    if let Some(i) = fail_job_rule(job, exit) {
        return Next::Fail {
            reason: "PodFailurePolicy".into(),
            message: format!(
                "Container {} for pod {} failed with exit code {} matching FailJob rule at index {i}",
                exit.container,
                exit.pod,
                exit.code.unwrap_or_default()
            ),
        };
    }
    if failed > backoff_limit {
        return Next::Fail {
            reason: "BackoffLimitExceeded".into(),
            message: "Job has reached the specified backoff limit".into(),
        };
    }
    Next::RunAgain {
        backoff: failure_backoff(failed),
    }
}

fn condition(type_: &str, reason: &str, message: &str, now: &Time) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// A pod is running: `startTime` (kept once set), `active` 1, `ready` 1. Pure.
pub fn status_running(old: &JobStatus, now: &Time) -> JobStatus {
    JobStatus {
        start_time: old.start_time.clone().or_else(|| Some(now.clone())),
        active: Some(1),
        ready: Some(1),
        terminating: Some(0),
        ..old.clone()
    }
}

/// The running pod ended: counted as succeeded or failed. Pure.
pub fn status_counted(old: &JobStatus, success: bool) -> JobStatus {
    let mut s = JobStatus {
        active: Some(0),
        ready: Some(0),
        ..old.clone()
    };
    if success {
        s.succeeded = Some(old.succeeded.unwrap_or(0) + 1);
    } else {
        s.failed = Some(old.failed.unwrap_or(0) + 1);
    }
    s
}

/// The Job finished: `SuccessCriteriaMet` + `Complete` with `completionTime`, or
/// `FailureTarget` + `Failed` without it. Pure.
pub fn status_finished(counted: &JobStatus, next: &Next, now: &Time) -> JobStatus {
    let mut s = JobStatus {
        active: Some(0),
        ready: Some(0),
        terminating: Some(0),
        ..counted.clone()
    };
    let mut conds = counted.conditions.clone().unwrap_or_default();
    match next {
        Next::Complete => {
            let (r, m) = (
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            );
            conds.push(condition("SuccessCriteriaMet", r, m, now));
            conds.push(condition("Complete", r, m, now));
            s.completion_time = Some(now.clone());
        }
        Next::Fail { reason, message } => {
            conds.push(condition("FailureTarget", reason, message, now));
            conds.push(condition("Failed", reason, message, now));
        }
        Next::RunAgain { .. } => {}
    }
    s.conditions = Some(conds);
    s
}

struct Ctx {
    sim: Arc<Sim>,
    jobs: Store<Job>,
}

/// Runs the Job part until the watch ends.
pub async fn run(sim: Arc<Sim>) {
    let mut wc = watcher::Config::default();
    if let Some(sel) = &sim.settings.job_selector {
        wc = wc.labels(sel);
    }
    let controller = Controller::new(sim.scoped::<Job>(), wc);
    let ctx = Arc::new(Ctx {
        sim,
        jobs: controller.store(),
    });
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                debug!(error = %e, "job reconcile");
            }
        })
        .await;
}

fn error_policy(_job: Arc<Job>, e: &Error, _ctx: Arc<Ctx>) -> Action {
    warn!(error = %e, label = e.metric_label(), "job");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Ctx>) -> Result<Action> {
    if job.meta().deletion_timestamp.is_some() || observe(&job) != JobState::Runnable {
        return Ok(Action::await_change());
    }
    let Some(uid) = job.uid() else {
        return Ok(Action::await_change());
    };
    let c = ctx.clone();
    let j = job.clone();
    ctx.sim.tasks.spawn_unique(format!("job/{uid}"), async move {
        let key = format!("{}/{}", j.namespace().unwrap_or_default(), j.name_any());
        if let Err(e) = execute(&c, &j).await {
            warn!(job = %key, error = %e, "job runner stopped; it restarts on the next reconcile");
        }
    });
    Ok(Action::requeue(Duration::from_secs(5)))
}

fn alive(ctx: &Ctx, ns: &str, name: &str, uid: &str) -> bool {
    ctx.jobs
        .get(&ObjectRef::new(name).within(ns))
        .is_some_and(|j| j.uid().as_deref() == Some(uid) && j.meta().deletion_timestamp.is_none())
}

async fn write(ctx: &Ctx, ns: &str, name: &str, status: &JobStatus) -> Result<()> {
    let patch = serde_json::json!({"status": status});
    ctx.sim
        .api::<Job>(ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

fn now() -> Time {
    Time(clock::now())
}

/// Runs pods for one Job until it completes or fails, or is deleted.
async fn execute(ctx: &Ctx, job: &Job) -> Result<()> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let sim = &ctx.sim;
    let Some(job) = still_runnable(ctx, &ns, &name, &uid).await? else {
        return Ok(());
    };
    let job = &job;
    let mut status = job.status.clone().unwrap_or_default();
    loop {
        if !alive(ctx, &ns, &name, &uid) {
            return Ok(());
        }
        let attempt = status.failed.unwrap_or(0) + status.succeeded.unwrap_or(0) + 1;
        // Fresh annotations: a `once` fault recorded on the Job by the previous attempt counts.
        let Some(fresh) = sim.api::<Job>(&ns).get_opt(&name).await? else {
            return Ok(());
        };
        let mut faults = match Faults::load(&sim.client, &child_of(&fresh)).await {
            Ok(f) => f,
            Err(e) => {
                warn!(job = %name, error = %e, "reading faults; running without");
                Faults::none(&ns, &name)
            }
        };
        let Some(pod) = create_pod(ctx, job, attempt).await? else {
            return Ok(());
        };
        // The pod of this attempt may have ended under a previous runner that lost the apiserver
        // before counting it: the Job controller counts a terminated pod, it never reruns it.
        let ended = terminated(&pod);
        let fault = match ended {
            Some(_) => None,
            None => {
                faults
                    .take(&sim.client, &sim.settings.rates, Step::Convert)
                    .await?
            }
        };
        if ended.is_none() {
            status = status_running(&status, &now());
            write(ctx, &ns, &name, &status).await?;
            info!(job = %format!("{ns}/{name}"), attempt, "pod running");
        }
        let log = sim.settings.volumes.job_log(&ns, &name, attempt);
        let exit = match (ended, fault) {
            (Some(exit), _) => exit,
            (None, Some(f)) => faulted(ctx, job, &pod, f, &log).await?,
            (None, None) => match run_pod(ctx, job, &pod, attempt, &log).await? {
                Some(exit) => exit,
                None => {
                    release_pod(ctx, job, &pod).await?;
                    return Ok(());
                }
            },
        };
        info!(job = %format!("{ns}/{name}"), attempt, success = exit.success, "pod finished");
        let counted = status_counted(&status, exit.success);
        match after_exit(job, &counted, &exit) {
            Next::RunAgain { backoff } => {
                status = counted;
                write(ctx, &ns, &name, &status).await?;
                if !backed_off(ctx, &ns, &name, &uid, backoff).await {
                    return Ok(());
                }
            }
            next => {
                // Counting the pod and finishing are two writes, as the Job controller does:
                // the apiserver sees the terminal conditions arrive on a quiet Job.
                write(ctx, &ns, &name, &counted).await?;
                let done = status_finished(&counted, &next, &now());
                write(ctx, &ns, &name, &done).await?;
                info!(job = %format!("{ns}/{name}"), outcome = ?next, "job finished");
                return Ok(());
            }
        }
    }
}

/// The Job as it is now, if pods are still due.
async fn still_runnable(ctx: &Ctx, ns: &str, name: &str, uid: &str) -> Result<Option<Job>> {
    // The event that started this runner may predate the end of the previous one: only the
    // Job as it is now says whether pods are still due.
    let Some(job) = ctx.sim.api::<Job>(ns).get_opt(name).await? else {
        return Ok(None);
    };
    if job.uid().as_deref() != Some(uid) || observe(&job) != JobState::Runnable {
        return Ok(None);
    }
    Ok(Some(job))
}

/// An attempt an injected fault fails: no process runs, the container exits 1 after a second
/// with the fault in its log and its termination message.
async fn faulted(ctx: &Ctx, job: &Job, pod: &Pod, f: Fault, log: &std::path::Path) -> Result<Exit> {
    let started = now();
    tokio::time::sleep(ctx.sim.settings.speed.ms(1000)).await;
    let message = format!(
        "injected {} convert fault (ferry-sim)",
        if f.terminal { "permanent" } else { "transient" }
    );
    append_log(log, &message);
    // The kubelet reports the container's exit on the pod, as for a real one: a pod
    // left Pending would never go when its Job is deleted.
    if let Some(c) = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
    {
        let id = pods::container_id(pod);
        let ended = pods::status_terminated(
            c,
            &id,
            "127.0.0.1",
            &started,
            &now(),
            1,
            Some(message.clone()),
        );
        pod_status(ctx, pod, &ended).await?;
    }
    Ok(Exit {
        success: false,
        terminal: f.terminal,
        message,
        code: Some(1),
        container: String::new(),
        pod: pod.name_any(),
    })
}

/// Waits out the back-off before the next pod; `false` when the Job went away meanwhile.
async fn backed_off(ctx: &Ctx, ns: &str, name: &str, uid: &str, backoff: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + ctx.sim.settings.speed.delay(backoff);
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if !alive(ctx, ns, name, uid) {
            return false;
        }
    }
    true
}

/// A line of the sim's own in the attempt's log (with its index record, see `logs`).
fn append_log(log: &std::path::Path, line: &str) {
    crate::logs::append_line(log, line);
}

fn child_of(job: &Job) -> Child<'_> {
    Child {
        api_version: "batch/v1",
        kind: "Job",
        plural: "jobs",
        namespace: job.metadata.namespace.as_deref().unwrap_or(""),
        name: job.metadata.name.as_deref().unwrap_or(""),
        annotations: job.metadata.annotations.as_ref(),
        owners: job.metadata.owner_references.as_deref().unwrap_or(&[]),
    }
}

async fn sources(sim: &Sim, ns: &str, c: &Container) -> Result<Sources> {
    let (secrets, maps) = process::references(c);
    let mut src = Sources::default();
    for name in secrets {
        if let Some(s) = sim.api::<Secret>(ns).get_opt(&name).await? {
            let mut data: std::collections::BTreeMap<String, String> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            data.extend(s.string_data.unwrap_or_default());
            src.secrets.insert(name, data);
        }
    }
    for name in maps {
        if let Some(m) = sim.api::<ConfigMap>(ns).get_opt(&name).await? {
            src.config_maps.insert(name, m.data.unwrap_or_default());
        }
    }
    Ok(src)
}

/// Creates the Pod object of `attempt` (or finds it, after a sim restart), as the Job controller
/// does; `None` when the Job went away while the apiserver refused the pod (e.g. Pod Security:
/// the Job controller keeps trying, and so does the sim).
/// How the pod's container ended, if it did.
fn terminated(pod: &Pod) -> Option<Exit> {
    let cs = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let t = cs.state.as_ref()?.terminated.as_ref()?;
    let success = t.exit_code == 0;
    Some(Exit {
        success,
        terminal: false,
        message: if success {
            String::new()
        } else {
            format!(
                "exit {}: {}",
                t.exit_code,
                t.message.clone().unwrap_or_default()
            )
        },
        code: Some(t.exit_code),
        container: cs.name.clone(),
        pod: pod.name_any(),
    })
}

async fn create_pod(ctx: &Ctx, job: &Job, attempt: i32) -> Result<Option<Pod>> {
    let sim = &ctx.sim;
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let log = sim.settings.volumes.job_log(&ns, &name, attempt);
    let want = pods::pod_for(job, attempt, &sim.settings.node_name, &log);
    let api = sim.api::<Pod>(&ns);
    let mut warned = false;
    loop {
        match api.create(&PostParams::default(), &want).await {
            Ok(p) => return Ok(Some(p)),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                // Only this Job's own pod (the sim restarted mid-attempt) is taken up; a pod of
                // that name controlled by anything else is never this Job's.
                if let Some(p) = api.get_opt(&want.name_any()).await? {
                    let mine = p
                        .owner_references()
                        .iter()
                        .any(|o| o.controller == Some(true) && o.uid == uid);
                    if mine {
                        return Ok(Some(p));
                    }
                    if !warned {
                        warn!(job = %format!("{ns}/{name}"), pod = %want.name_any(), "FailedCreate: the pod's name is taken by another owner");
                        warned = true;
                    }
                }
            }
            Err(kube::Error::Api(s)) if matches!(s.code, 403 | 422) => {
                if !warned {
                    warn!(job = %format!("{ns}/{name}"), "FailedCreate: {}", s.message);
                    warned = true;
                }
            }
            Err(e) => return Err(e.into()),
        }
        tokio::time::sleep(sim.settings.speed.ms(2000).max(Duration::from_millis(100))).await;
        if !alive(ctx, &ns, &name, &uid) {
            return Ok(None);
        }
    }
}

/// What the kubelet does with the pod of a Job that went away (deleted, its pods with it by the
/// garbage collector): its container killed (by [`run_pod`]), the pod's terminal status
/// written, and — once it is marked for deletion — the pod deleted with grace 0 and its UID as
/// precondition (kubelet `pkg/kubelet/status/status_manager.go`, `syncPod`: `canBeDeleted`, then
/// `Delete` with `GracePeriodSeconds: 0`). A pod already terminal when the collector deletes it
/// goes at once by the apiserver's own rule (`pkg/registry/core/pod/strategy.go`,
/// `CheckGracefulDelete`: a Failed or Succeeded pod gets grace 0).
async fn release_pod(ctx: &Ctx, job: &Job, pod: &Pod) -> Result<()> {
    let api = ctx.sim.api::<Pod>(&pod.namespace().unwrap_or_default());
    let Some(fresh) = api.get_opt(&pod.name_any()).await? else {
        return Ok(());
    };
    if fresh.uid() != pod.uid() {
        return Ok(());
    }
    let terminal = fresh
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Failed" || p == "Succeeded");
    if !terminal
        && let Some(c) = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
    {
        let at = now();
        let started = fresh
            .status
            .as_ref()
            .and_then(|s| s.start_time.clone())
            .unwrap_or_else(|| at.clone());
        // Killed by the kubelet: SIGKILL reads as 137.
        let killed = pods::status_terminated(
            c,
            &pods::container_id(&fresh),
            "127.0.0.1",
            &started,
            &at,
            137,
            Some("the pod was deleted".into()),
        );
        pod_status(ctx, &fresh, &killed).await?;
    }
    if fresh.metadata.deletion_timestamp.is_some() {
        let dp = kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(kube::api::Preconditions {
                uid: fresh.uid(),
                resource_version: None,
            }),
            ..kube::api::DeleteParams::default()
        };
        match api.delete(&fresh.name_any(), &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn pod_status(ctx: &Ctx, pod: &Pod, status: &PodStatus) -> Result<()> {
    let patch = serde_json::json!({"status": status});
    ctx.sim
        .api::<Pod>(&pod.namespace().unwrap_or_default())
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// Waits until every claim the pod names is bound, as the scheduler and the kubelet do: a
/// missing claim keeps the pod Pending; an unbound claim on a first-consumer class gets the
/// node written into `volume.kubernetes.io/selected-node` (the scheduler's choice) and is waited
/// for. `false` when the Job went away meanwhile.
async fn claims_bound(ctx: &Ctx, job: &Job, pod: &Pod, container: &Container) -> Result<bool> {
    let sim = &ctx.sim;
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    let claims = pods::claims(&pod.spec.clone().unwrap_or_default());
    let api = sim.api::<PersistentVolumeClaim>(&ns);
    let mut last_why = String::new();
    loop {
        let mut why = String::new();
        for claim in &claims {
            let Some(pvc) = api.get_opt(claim).await? else {
                why = format!("persistentvolumeclaim \"{claim}\" not found");
                break;
            };
            if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") {
                continue;
            }
            let spec = pvc.spec.clone().unwrap_or_default();
            let selected = pvc.annotations().contains_key(storage::SELECTED_NODE);
            let binding =
                storage::claim_binding(sim, spec.storage_class_name.as_deref(), false).await?;
            if !selected && matches!(binding, storage::Binding::FirstConsumer { .. }) {
                let patch = serde_json::json!({"metadata": {"annotations": {
                    storage::SELECTED_NODE: sim.settings.node_name,
                }}});
                api.patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                info!(pvc = %format!("{ns}/{claim}"), node = %sim.settings.node_name, "first consumer scheduled: node selected");
            }
            why = format!("waiting for persistentvolumeclaim \"{claim}\" to be bound");
            break;
        }
        if why.is_empty() {
            return Ok(true);
        }
        if why != last_why {
            pod_status(ctx, pod, &pods::status_pending(container, &why)).await?;
            debug!(job = %format!("{ns}/{name}"), %why, "pod pending");
            last_why = why;
        }
        tokio::time::sleep(sim.settings.speed.ms(500).max(Duration::from_millis(100))).await;
        if !alive(ctx, &ns, &name, &uid) {
            return Ok(false);
        }
    }
}

/// One run of the Job's container in its pod, as the kubelet runs it (`run_pod`).
struct Run<'a> {
    ctx: &'a Ctx,
    /// The Job's namespace, name and uid.
    ns: String,
    name: String,
    uid: String,
    pod: &'a Pod,
    container: Container,
    log: &'a std::path::Path,
}

impl Run<'_> {
    /// How the run ended, for the Job controller.
    fn exit(&self, success: bool, terminal: bool, message: String, code: Option<i32>) -> Exit {
        Exit {
            success,
            terminal,
            message,
            code,
            container: self.container.name.clone(),
            pod: self.pod.name_any(),
        }
    }

    fn alive(&self) -> bool {
        alive(self.ctx, &self.ns, &self.name, &self.uid)
    }
}

/// Where one step of a run leaves it.
enum Then<T> {
    /// Go on, with what the step made.
    Go(T),
    /// The container ended, or will never start, thus.
    Exited(Exit),
    /// The Job went away meanwhile (its process, if any, killed).
    Gone,
}

/// Runs the Job's first container once in `pod`; `None` when the Job went away meanwhile (the
/// process, if any, is killed).
async fn run_pod(
    ctx: &Ctx,
    job: &Job,
    pod_obj: &Pod,
    attempt: i32,
    log: &std::path::Path,
) -> Result<Option<Exit>> {
    let sim = &ctx.sim;
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let pod_spec = template.spec.clone().unwrap_or_default();
    let Some(container) = pod_spec.containers.first().cloned() else {
        return Ok(Some(Exit {
            success: false,
            terminal: true,
            message: "the pod template has no container".into(),
            code: None,
            container: String::new(),
            pod: pod_obj.name_any(),
        }));
    };
    let run = Run {
        ctx,
        ns: job.namespace().unwrap_or_default(),
        name: job.name_any(),
        uid: job.uid().unwrap_or_default(),
        pod: pod_obj,
        container,
        log,
    };
    if !claims_bound(ctx, job, pod_obj, &run.container).await? {
        return Ok(None);
    }
    let facts = pod_facts(&run, &pod_spec, attempt);
    let (env, argv) = match configured(&run, &facts).await? {
        Then::Go(configured) => configured,
        Then::Exited(exit) => return Ok(Some(exit)),
        Then::Gone => return Ok(None),
    };
    let path_var = std::env::var("PATH").unwrap_or_default();
    let Some(program) = process::find_executable(&argv[0], &sim.settings.bin_dir, &path_var) else {
        let message = format!(
            "exec: {:?}: executable file not found in {} or $PATH",
            argv[0],
            sim.settings.bin_dir.display()
        );
        append_log(log, &message);
        return Ok(Some(run.exit(false, false, message, Some(127))));
    };
    let workdir = std::env::temp_dir().join(format!("ferry-sim-{}-{attempt}", run.uid));
    // The container's mounts stand under the attempt's root; paths into them are rewritten.
    let root = workdir.join("root");
    let mounts = match pods::plan(
        &pod_spec,
        &run.container,
        &run.ns,
        &sim.settings.volumes,
        &root,
        &facts,
    ) {
        Ok(m) => m,
        Err(message) => {
            append_log(log, &message);
            return Ok(Some(run.exit(false, true, message, None)));
        }
    };
    let _ = std::fs::remove_dir_all(&workdir);
    pods::make(&mounts).map_err(|e| Error::io(&root, e))?;
    let argv: Vec<String> = argv.iter().map(|a| pods::rewrite(a, &mounts)).collect();
    let env: Vec<(String, String)> = env
        .into_iter()
        .map(|(k, v)| (k, pods::rewrite(&v, &mounts)))
        .collect();
    // The runtime makes the container's log before starting it: whoever sees the container
    // running finds its log.
    crate::logs::Writer::open(log).map_err(|e| Error::io(log, e))?;
    let started = now();
    let id = pods::container_id(pod_obj);
    pod_status(
        ctx,
        pod_obj,
        &pods::status_running(&run.container, &id, "127.0.0.1", &started),
    )
    .await?;
    let Some((status, written)) = supervise(&run, &program, &argv, &env, &workdir, &mounts).await?
    else {
        return Ok(None);
    };
    report_exit(&run, status, &written, &id, &started)
        .await
        .map(Some)
}

/// What the pod tells its container about itself (the downward API's facts).
fn pod_facts(run: &Run<'_>, pod_spec: &PodSpec, attempt: i32) -> PodFacts {
    PodFacts {
        name: run.pod.name_any(),
        namespace: run.ns.clone(),
        uid: run
            .pod
            .uid()
            .unwrap_or_else(|| format!("{}-{attempt}", run.uid)),
        node_name: run.ctx.sim.settings.node_name.clone(),
        service_account: pod_spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into()),
        // The pod's own labels: the Job controller adds its own (the Job's uid) to the template's,
        // and the downward API reads them there.
        labels: run.pod.labels().clone(),
        annotations: run.pod.annotations().clone(),
    }
}

/// The container's environment and command line, resolved from the Secrets and ConfigMaps it
/// names as the kubelet resolves them; a container without a command never starts.
async fn configured(
    run: &Run<'_>,
    pod: &PodFacts,
) -> Result<Then<(Vec<(String, String)>, Vec<String>)>> {
    let sim = &run.ctx.sim;
    // The kubelet retries a container it cannot configure (CreateContainerConfigError) forever.
    let mut warned = false;
    loop {
        let src = sources(sim, &run.ns, &run.container).await?;
        let resolved = process::resolve_env(&run.container, pod, &src)
            .and_then(|env| process::argv(&run.container, &env).map(|argv| (env, argv)));
        match resolved {
            Ok(ok) => return Ok(Then::Go(ok)),
            Err(msg) if msg.contains("has no command") => {
                append_log(run.log, &msg);
                return Ok(Then::Exited(run.exit(false, true, msg, None)));
            }
            Err(msg) => {
                if !warned {
                    warn!(job = %format!("{}/{}", run.ns, run.name), "CreateContainerConfigError: {msg}");
                    append_log(run.log, &format!("CreateContainerConfigError: {msg}"));
                    warned = true;
                }
                tokio::time::sleep(sim.settings.speed.ms(2000).max(Duration::from_millis(100)))
                    .await;
                if !run.alive() {
                    return Ok(Then::Gone);
                }
            }
        }
    }
}

/// The container's process, from its start to its exit; gives its exit status and the
/// termination message file it wrote. `None` when the Job went away meanwhile: the process is
/// killed.
async fn supervise(
    run: &Run<'_>,
    program: &std::path::Path,
    argv: &[String],
    env: &[(String, String)],
    workdir: &std::path::Path,
    mounts: &[pods::Mount],
) -> Result<Option<(std::process::ExitStatus, String)>> {
    let sim = &run.ctx.sim;
    let mut proc = process::spawn(
        program,
        &argv[1..],
        env,
        workdir,
        run.log,
        &sim.settings.bin_dir,
    )?;
    debug!(job = %run.name, program = %program.display(), "started");
    let status = loop {
        tokio::select! {
            st = proc.wait() => break Some(st),
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                if !run.alive() { break None; }
            }
        }
    };
    // All its output is in the log before the pod says it terminated (see `Running::finish`).
    proc.finish().await;
    // Read before the attempt's root goes: the kubelet reads it when the container ends.
    let written = pods::termination_file(mounts)
        .and_then(|f| std::fs::read_to_string(f).ok())
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(workdir);
    let Some(status) = status else {
        info!(job = %format!("{}/{}", run.ns, run.name), "job deleted; killed its process");
        return Ok(None);
    };
    let status = status.map_err(|e| Error::io(program, e))?;
    Ok(Some((status, written)))
}

/// The container's exit, written on the pod as the kubelet reports it (its code and
/// termination message), and read for the Job controller.
async fn report_exit(
    run: &Run<'_>,
    status: std::process::ExitStatus,
    written: &str,
    id: &str,
    started: &Time,
) -> Result<Exit> {
    let log = run.log;
    // A process killed by a signal reads as the shell would report it: 128 + the signal.
    let code = status.code().unwrap_or_else(|| {
        128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
    });
    let message = if status.success() {
        String::new()
    } else {
        format!("exit {code}: {}", process::tail(log, 3))
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let termination = pods::termination_message(
        written,
        &text,
        !status.success(),
        run.container.termination_message_policy.as_deref(),
    );
    pod_status(
        run.ctx,
        run.pod,
        &pods::status_terminated(
            &run.container,
            id,
            "127.0.0.1",
            started,
            &now(),
            code,
            termination,
        ),
    )
    .await?;
    Ok(run.exit(status.success(), false, message, Some(code)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::batch::v1::JobSpec;

    use super::*;

    fn job(backoff: i32, completions: i32) -> Job {
        Job {
            spec: Some(JobSpec {
                backoff_limit: Some(backoff),
                completions: Some(completions),
                ..JobSpec::default()
            }),
            ..Job::default()
        }
    }

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn a_pod_that_ended_is_counted_as_it_ended_and_a_running_one_is_not() {
        let container = k8s_openapi::api::core::v1::Container {
            name: "convert".into(),
            ..Default::default()
        };
        let started = t("2026-01-01T00:00:00Z");
        let pod = |status| Pod {
            status: Some(status),
            ..Pod::default()
        };
        let running = pod(pods::status_running(
            &container,
            "ferry-sim://1",
            "127.0.0.1",
            &started,
        ));
        assert!(terminated(&running).is_none());
        let done = |code| {
            pod(pods::status_terminated(
                &container,
                "ferry-sim://1",
                "127.0.0.1",
                &started,
                &started,
                code,
                Some("disk 0 failed".into()),
            ))
        };
        let ok = terminated(&done(0)).unwrap();
        assert!(ok.success && !ok.terminal && ok.code == Some(0));
        let bad = terminated(&done(3)).unwrap();
        assert!(!bad.success && bad.code == Some(3) && bad.container == "convert");
        assert!(bad.message.contains("disk 0 failed"), "{}", bad.message);
    }

    fn ok() -> Exit {
        Exit {
            success: true,
            terminal: false,
            message: String::new(),
            code: Some(0),
            container: "c".into(),
            pod: "p".into(),
        }
    }

    fn fail(terminal: bool) -> Exit {
        Exit {
            success: false,
            terminal,
            message: "m".into(),
            code: Some(1),
            container: "c".into(),
            pod: "p".into(),
        }
    }

    #[test]
    fn a_fail_job_rule_on_the_exit_code_fails_the_job_at_once() {
        use k8s_openapi::api::batch::v1::{
            PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
        };
        let rule = |action: &str, op: &str, values: Vec<i32>, container: Option<&str>| {
            PodFailurePolicyRule {
                action: action.into(),
                on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                    container_name: container.map(str::to_owned),
                    operator: op.into(),
                    values,
                }),
                on_pod_conditions: None,
            }
        };
        let mut j = job(6, 1);
        j.spec.as_mut().unwrap().pod_failure_policy = Some(PodFailurePolicy {
            rules: vec![
                rule("Count", "In", vec![4], None),
                rule("FailJob", "In", vec![3, 4], Some("c")),
            ],
        });
        let exit = |code: i32, container: &str| Exit {
            code: Some(code),
            container: container.into(),
            ..fail(false)
        };
        assert_eq!(fail_job_rule(&j, &exit(3, "c")), Some(1));
        assert_eq!(
            fail_job_rule(&j, &exit(4, "c")),
            None,
            "the first matching rule decides"
        );
        assert_eq!(fail_job_rule(&j, &exit(3, "other")), None);
        assert_eq!(fail_job_rule(&j, &exit(1, "c")), None);
        assert_eq!(fail_job_rule(&j, &ok()), None);
        let counted = status_counted(&JobStatus::default(), false);
        assert!(matches!(
            after_exit(&j, &counted, &exit(3, "c")),
            Next::Fail { reason, message }
                if reason == "PodFailurePolicy" && message.contains("exit code 3 matching FailJob rule at index 1")
        ));
        j.spec.as_mut().unwrap().pod_failure_policy = Some(PodFailurePolicy {
            rules: vec![rule("FailJob", "NotIn", vec![0, 1], None)],
        });
        assert_eq!(fail_job_rule(&j, &exit(2, "c")), Some(0));
        assert_eq!(fail_job_rule(&j, &exit(1, "c")), None);
    }

    #[test]
    fn observes_finished_and_suspended_jobs() {
        let mut j = job(0, 1);
        assert_eq!(observe(&j), JobState::Runnable);
        j.spec.as_mut().unwrap().suspend = Some(true);
        assert_eq!(observe(&j), JobState::Suspended);
        j.status = Some(status_finished(
            &JobStatus::default(),
            &Next::Complete,
            &t("2026-01-01T00:00:00Z"),
        ));
        assert_eq!(observe(&j), JobState::Finished);
    }

    #[test]
    fn a_success_completes_and_a_failure_retries_within_the_backoff_limit() {
        let j = job(2, 1);
        let s = status_counted(&JobStatus::default(), true);
        assert_eq!(after_exit(&j, &s, &ok()), Next::Complete);
        let f1 = status_counted(&JobStatus::default(), false);
        assert_eq!(
            after_exit(&j, &f1, &fail(false)),
            Next::RunAgain {
                backoff: Duration::from_secs(10)
            }
        );
        let f2 = status_counted(&f1, false);
        assert_eq!(
            after_exit(&j, &f2, &fail(false)),
            Next::RunAgain {
                backoff: Duration::from_secs(20)
            }
        );
        let f3 = status_counted(&f2, false);
        assert!(
            matches!(after_exit(&j, &f3, &fail(false)), Next::Fail { reason, .. } if reason == "BackoffLimitExceeded")
        );
    }

    #[test]
    fn a_terminal_failure_fails_at_once() {
        let j = job(6, 1);
        let f1 = status_counted(&JobStatus::default(), false);
        assert!(
            matches!(after_exit(&j, &f1, &fail(true)), Next::Fail { reason, .. } if reason == "PodFailurePolicy")
        );
    }

    #[test]
    fn completions_run_one_after_another() {
        let j = job(0, 2);
        let s1 = status_counted(&JobStatus::default(), true);
        assert_eq!(
            after_exit(&j, &s1, &ok()),
            Next::RunAgain {
                backoff: Duration::ZERO
            }
        );
        assert_eq!(
            after_exit(&j, &status_counted(&s1, true), &ok()),
            Next::Complete
        );
    }

    #[test]
    fn default_backoff_limit_is_six() {
        let mut s = JobStatus::default();
        for _ in 0..6 {
            s = status_counted(&s, false);
        }
        assert!(matches!(
            after_exit(&Job::default(), &s, &fail(false)),
            Next::RunAgain { .. }
        ));
        s = status_counted(&s, false);
        assert!(matches!(
            after_exit(&Job::default(), &s, &fail(false)),
            Next::Fail { .. }
        ));
    }

    #[test]
    fn statuses_keep_start_time_and_order_terminal_conditions() {
        let t0 = t("2026-01-01T00:00:00Z");
        let t1 = t("2026-01-01T00:00:05Z");
        let r = status_running(&JobStatus::default(), &t0);
        assert_eq!(
            (r.active, r.ready, r.start_time.clone()),
            (Some(1), Some(1), Some(t0.clone()))
        );
        let r2 = status_running(&status_counted(&r, false), &t1);
        assert_eq!(r2.start_time, Some(t0.clone()));
        assert_eq!(r2.failed, Some(1));
        let done = status_finished(&status_counted(&r2, true), &Next::Complete, &t1);
        let types: Vec<_> = done
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, vec!["SuccessCriteriaMet", "Complete"]);
        assert_eq!(
            (done.active, done.completion_time),
            (Some(0), Some(t1.clone()))
        );
        let failed = status_finished(
            &r2,
            &Next::Fail {
                reason: "BackoffLimitExceeded".into(),
                message: "x".into(),
            },
            &t1,
        );
        let types: Vec<_> = failed
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(types, vec!["FailureTarget", "Failed"]);
        assert_eq!(failed.completion_time, None);
    }

    #[test]
    fn failure_backoff_caps_at_six_minutes() {
        assert_eq!(failure_backoff(1), Duration::from_secs(10));
        assert_eq!(failure_backoff(3), Duration::from_secs(40));
        assert_eq!(failure_backoff(20), Duration::from_secs(360));
    }
}
