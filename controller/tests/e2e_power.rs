//! End to end, never two live copies of one VM: sampled every 250 ms, the source VM (vcsim) is
//! never `poweredOn` while an instance of the target (API server) is `Running` — through a failure
//! in Starting, a failure in Validating, a cancel in every phase and a delete, a controller
//! SIGKILL between halting the target and powering the source on, an instance that never goes,
//! a release written by someone else, and a cancel right after the VM was released. Each test also checks that the source does end
//! up powered on where the policy asks, so that none passes by never powering it on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use ferry_controller::apis::kubevirt::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use ferry_crds::source::{PowerRestoreResult, SourcePowerRestore};
use ferry_crds::{
    ConditionType, Phase, Readiness, Reason, RestorePowerState, VirtualMachineMigration, names,
};
use ferry_harness::{InventoryVm, eventually};
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

/// What the sampler saw.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    samples: u64,
    source_on: u64,
    target_running: u64,
    both: u64,
}

/// Every 250 ms: the source VM's power state from vcsim, then the target's VMI from the API
/// server (in that order: a sample showing both live means both were live when the power was
/// read — an instance does not get to Running in the milliseconds between). It runs on a thread
/// and runtime of its own: vim_rs's session blocks on the runtime when dropped, which a test's
/// runtime shutting down after a failed assertion would never answer.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Counts>>,
}

impl Sampler {
    async fn start(env: &Env, vm: &InventoryVm, vmm: &VirtualMachineMigration) -> Sampler {
        let info = &env.lab.info;
        let ep = ferry_vsphere::Endpoint {
            url: info.vcenter.url.clone(),
            username: info.vcenter.username.clone(),
            password: info.vcenter.password.clone().into(),
            tls: ferry_vsphere::TlsPolicy::Insecure,
        };
        ferry_vsphere::tls::install_default_provider();
        let lab = env.lab;
        let (ns, moref, target) = (env.ns.name.clone(), vm.moref.clone(), names::vm_name(vmm));
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let session = ferry_vsphere::Session::connect(&ep).await.unwrap();
                let vmis: Api<VirtualMachineInstance> =
                    Api::namespaced(lab.client().await.unwrap(), &ns);
                let _ = ready_tx.send(());
                let mut c = Counts::default();
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                while !stopped.load(Ordering::SeqCst) {
                    tick.tick().await;
                    let Ok(power) = session.power_state(&moref).await else {
                        continue;
                    };
                    let Ok(vmi) = vmis.get_opt(&target).await else {
                        continue;
                    };
                    let on = power.as_str() == "poweredOn";
                    let running = vmi
                        .and_then(|v| v.status)
                        .is_some_and(|s| s.phase == Some(VmiPhase::Running));
                    c.samples += 1;
                    c.source_on += u64::from(on);
                    c.target_running += u64::from(running);
                    c.both += u64::from(on && running);
                }
                let _ = session.logout().await;
                c
            })
        });
        ready_rx.await.expect("the sampler started");
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    async fn finish(mut self) -> Counts {
        self.stop.store(true, Ordering::SeqCst);
        let thread = self.thread.take().unwrap();
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap()
    }
}

impl Drop for Sampler {
    /// A test that failed before `finish` lets its sampler end on its own.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The power state of the vcsim VM `moref` now.
async fn power_of(env: &Env, moref: &str) -> String {
    let info = &env.lab.info;
    let ep = ferry_vsphere::Endpoint {
        url: info.vcenter.url.clone(),
        username: info.vcenter.username.clone(),
        password: info.vcenter.password.clone().into(),
        tls: ferry_vsphere::TlsPolicy::Insecure,
    };
    let s = ferry_vsphere::Session::connect(&ep).await.unwrap();
    let p = s.power_state(moref).await.unwrap();
    let _ = s.logout().await;
    p.as_str().to_owned()
}

fn on_cancel_or_failure(mut vmm: VirtualMachineMigration) -> VirtualMachineMigration {
    vmm.spec.source.power.restore_power_state = RestorePowerState::OnCancelOrFailure;
    vmm
}

fn restore_of(v: &VirtualMachineMigration) -> Option<SourcePowerRestore> {
    v.status.as_ref()?.source_power_restore.as_deref().cloned()
}

/// Waits until `name` has ended and its power-on (if any) too.
async fn wait_settled(env: &Env, name: &str, secs: u64) -> VirtualMachineMigration {
    env.wait_for(name, &format!("{name} to settle"), secs, |v| {
        v.phase().is_terminal() && restore_of(v).is_none_or(|r| r.result.is_some())
    })
    .await
}

async fn vm_of(env: &Env, v: &VirtualMachineMigration) -> Option<VirtualMachine> {
    env.ns
        .api::<VirtualMachine>()
        .get_opt(&names::vm_name(v))
        .await
        .unwrap()
}

async fn vmi_of(env: &Env, v: &VirtualMachineMigration) -> Option<VirtualMachineInstance> {
    env.ns
        .api::<VirtualMachineInstance>()
        .get_opt(&names::vm_name(v))
        .await
        .unwrap()
}

/// A failure in Starting under OnCancelOrFailure: the first instance fails, KubeVirt backs off
/// (CrashLoopBackOff ends Starting after the error grace) and would start the next one ten
/// seconds later. ferry halts the VM before it powers the source on, so that next one never
/// comes. Retried, it migrates, and `ferry report` shows both attempts' outages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_in_starting_halts_the_target_before_the_source_is_powered_on() {
    let mut env = Env::new("power-starting", 4).await;
    env.extra_controller_args = vec!["--kubevirt-error-grace".into(), "3s".into()];
    env.start_sim();
    env.start_controller();
    let vmm = on_cancel_or_failure(with_fault(env.migration("crashy"), "vmi=once"));
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    let v = wait_settled(&env, "crashy", 300).await;
    let seen = sampler.finish().await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let (reason, message) = last_failure(&v);
    assert_eq!(reason, "CrashLoopBackOff", "{message}");
    let r = restore_of(&v).unwrap();
    assert_eq!(r.result, Some(PowerRestoreResult::PoweredOn), "{r:?}");
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "the policy asks for it"
    );
    assert_eq!(
        vm_of(&env, &v).await.unwrap().spec.run_strategy.as_deref(),
        Some("Halted"),
        "stopped first: KubeVirt starts no next instance"
    );
    assert!(vmi_of(&env, &v).await.is_none());
    assert!(seen.samples >= 8 && seen.source_on > 0, "{seen:?}");
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");

    // Retried (the fault fires once): the source was powered back on, so the retry starts over
    // and powers it off again. The report keeps both outages, in all three formats.
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.patch_spec("crashy", serde_json::json!({"retry": 1}))
        .await;
    let v = env.wait_phase("crashy", Phase::Succeeded, 300).await;
    let seen = sampler.finish().await;
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");
    let status = v.status.as_ref().unwrap();
    assert_eq!(status.attempts, 2);
    let first = status
        .earlier_outages
        .first()
        .expect("attempt 1's outage kept");
    assert_eq!(
        (first.attempt, first.restored_at.clone()),
        (1, r.finished_at.clone())
    );
    let report = |format: &str| {
        let out = std::process::Command::new(bin_dir().join("ferry"))
            .arg("--kubeconfig")
            .arg(&env.lab.info.kubeconfig)
            .args(["-n", &env.ns.name, "report", "-o", format])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let json: serde_json::Value = serde_json::from_str(&report("json")).unwrap();
    let outages = json["vms"][0]["outages"].as_array().unwrap().clone();
    let ends: Vec<(i64, &str)> = outages
        .iter()
        .map(|o| {
            (
                o["attempt"].as_i64().unwrap(),
                o["endedBy"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(ends, [(1, "SourceRestored"), (2, "Migrated")], "{json}");
    let secs: Vec<i64> = outages
        .iter()
        .map(|o| o["seconds"].as_i64().unwrap())
        .collect();
    let sum = json["vms"][0]["downtimeSeconds"].as_i64().unwrap();
    assert_eq!(sum, secs.iter().sum::<i64>());
    let csv = report("csv");
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(
        col("outages"),
        format!("#1={}:restored;#2={}:migrated", secs[0], secs[1])
    );
    assert_eq!(col("downtime_seconds"), sum.to_string());
    let md = report("md");
    assert!(
        md.contains("in all (attempt 1: ") && md.contains("(source powered back on) · attempt 2: "),
        "{md}"
    );
}

/// A lab with the sim at speed 10 and a controller that waits `agent_timeout` for a guest
/// agent, and migration `name` (OnCancelOrFailure) whose guest never gets one.
async fn agentless(test: &str, name: &str, agent_timeout: &str) -> (Env, VirtualMachineMigration) {
    let mut env = Env::new(test, 4).await;
    env.extra_controller_args = vec!["--agent-timeout".into(), agent_timeout.into()];
    env.sim_args = vec!["--speed".into(), "10".into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = on_cancel_or_failure(with_fault(env.migration(name), "agent=permanent"));
    vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
    (env, vmm)
}

/// `v` failed in Validating for want of the guest agent.
fn assert_failed_waiting_for_the_agent(v: &VirtualMachineMigration) {
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(v));
    let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert_eq!(
        (f.phase, f.reason),
        (Phase::Validating, Reason::GuestNotReady)
    );
}

/// A failure in Validating under OnCancelOrFailure (the guest has no agent): the instance runs
/// when the migration fails; ferry halts it and powers the source on only once it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_in_validating_powers_the_source_on_only_after_the_instance_is_gone() {
    let (env, vmm) = agentless("power-validating", "agentless", "3s").await;
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    let v = wait_settled(&env, "agentless", 300).await;
    let seen = sampler.finish().await;
    assert_failed_waiting_for_the_agent(&v);
    let r = restore_of(&v).unwrap();
    assert_eq!(r.result, Some(PowerRestoreResult::PoweredOn), "{r:?}");
    assert!(r.target_stopping_since.is_some(), "it waited: {r:?}");
    assert_eq!(env.power_state().await, "poweredOn");
    assert!(vmi_of(&env, &v).await.is_none());
    assert!(
        seen.target_running > 0 && seen.source_on > 0,
        "both were live, one after the other: {seen:?}"
    );
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");
}

/// Someone else "releases" the target VM while Validating waits for a guest agent that never
/// connects: they remove its owner reference and write ferry's released label. Neither is a
/// hand-over (only the migration's own record of its release is): the migration still fails
/// its guest check rather than succeed unverified, and the power rule halts the VM ferry made
/// before it powers the source back on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_written_by_someone_else_is_no_hand_over() {
    let (env, vmm) = agentless("power-forged", "forged", "30s").await;
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    let v = env.wait_phase("forged", Phase::Validating, 300).await;
    let target = names::vm_name(&v);
    let vms = env.ns.api::<VirtualMachine>();
    let forged = serde_json::json!({"metadata": {
        "ownerReferences": null,
        "labels": {names::RELEASED_LABEL: names::RELEASED_VALUE},
    }});
    vms.patch(&target, &PatchParams::default(), &Patch::Merge(&forged))
        .await
        .unwrap();
    let v = wait_settled(&env, "forged", 300).await;
    let seen = sampler.finish().await;
    assert_failed_waiting_for_the_agent(&v);
    let s = v.status.as_ref().unwrap();
    let record = ferry_crds::child::find(&s.children, "VirtualMachine", &target).unwrap();
    assert!(!record.released, "ferry released nothing: {record:?}");
    let vm = vms.get(&target).await.unwrap();
    assert_eq!(
        vm.spec.run_strategy.as_deref(),
        Some("Halted"),
        "the VM ferry made is halted like any of its own"
    );
    let r = restore_of(&v).unwrap();
    assert_eq!(r.result, Some(PowerRestoreResult::PoweredOn), "{r:?}");
    assert_eq!(env.power_state().await, "poweredOn");
    assert!(vmi_of(&env, &v).await.is_none());
    assert!(seen.target_running > 0 && seen.source_on > 0, "{seen:?}");
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");
}

/// The controller is SIGKILLed the moment it halted the target (the instance still stopping)
/// and restarted: the restarted one waits for the instance to go, then powers the source on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_between_halting_the_target_and_powering_the_source_resumes_safely() {
    let (mut env, vmm) = agentless("power-kill", "killed", "3s").await;
    let target = names::vm_name(&vmm);
    let mut strategies = std::pin::pin!(
        watcher(
            env.ns.api::<VirtualMachine>(),
            watcher::Config::default().fields(&format!("metadata.name={target}"))
        )
        .applied_objects()
        .filter_map(|v| async move { v.ok().and_then(|v: VirtualMachine| v.spec.run_strategy) })
    );
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    let mut started = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let Ok(Some(s)) = tokio::time::timeout_at(deadline, strategies.next()).await else {
            panic!("the VM was never halted; logs in {}", env.scratch.display())
        };
        started |= s == "Always";
        if started && s == "Halted" {
            env.controller.as_mut().unwrap().kill();
            break;
        }
    }
    // Killed while the instance is still there, stopping (its grace, 3 s at this speed).
    let v = env.get("killed").await;
    eventually(
        "the instance stopping after the kill",
        Duration::from_secs(30),
        || async {
            vmi_of(&env, &v)
                .await
                .filter(|i| i.metadata.deletion_timestamp.is_some())
        },
    )
    .await
    .unwrap();
    assert_eq!(env.power_state().await, "poweredOff");
    env.start_controller();
    let v = wait_settled(&env, "killed", 300).await;
    let seen = sampler.finish().await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let r = restore_of(&v).unwrap();
    assert_eq!(r.result, Some(PowerRestoreResult::PoweredOn), "{r:?}");
    assert_eq!(env.power_state().await, "poweredOn");
    assert!(seen.target_running > 0 && seen.source_on > 0, "{seen:?}");
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");
}

/// An instance that never goes (its node lost: the sim's `stop=permanent`): past its grace and
/// the margin, ferry gives up, the migration ends with TargetStillRunning, the source stays off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_never_goes_leaves_the_source_off_with_target_still_running() {
    let mut env = Env::new("power-stuck", 4).await;
    env.extra_controller_args = vec![
        "--agent-timeout".into(),
        "3s".into(),
        "--target-stop-margin".into(),
        "1s".into(),
    ];
    env.sim_args = vec!["--speed".into(), "10".into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = on_cancel_or_failure(with_fault(
        env.migration("stuck"),
        "agent=permanent,stop=permanent",
    ));
    vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    env.wait_phase("stuck", Phase::Failed, 300).await;
    // From the failure on: the instance runs on, the source must stay off.
    let after = Sampler::start(&env, &env.vm, &vmm).await;
    let v = wait_settled(&env, "stuck", 300).await;
    let seen = sampler.finish().await;
    let since_failure = after.finish().await;
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert_eq!(
        (f.phase, f.reason),
        (Phase::Validating, Reason::TargetStillRunning)
    );
    let vmi_name = names::vm_name(&v);
    assert!(
        f.message.contains(&vmi_name) && f.message.contains("stays powered off"),
        "names the instance and what happens: {}",
        f.message
    );
    let ready = v.condition(ConditionType::Ready).unwrap();
    assert_eq!(ready.reason, Reason::TargetStillRunning);
    let r = restore_of(&v).unwrap();
    assert_eq!(r.result, Some(PowerRestoreResult::TargetStillRunning));
    assert_eq!(
        env.power_state().await,
        "poweredOff",
        "the source stays off"
    );
    assert_eq!(
        since_failure.source_on, 0,
        "never powered on: {since_failure:?}"
    );
    assert!(
        since_failure.samples >= 8 && since_failure.target_running > 0,
        "{since_failure:?}"
    );
    env.wait_event("stuck", "CleanupIncomplete").await;
    // As an administrator would once the node is known dead: let the instance go.
    let vmis = env.ns.api::<VirtualMachineInstance>();
    vmis.patch(
        &vmi_name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    // Ferry does not power the source on by itself after giving up.
    eventually("the instance gone", Duration::from_secs(30), || async {
        matches!(vmis.get_opt(&vmi_name).await, Ok(None)).then_some(())
    })
    .await
    .unwrap();
    let again = env.get("stuck").await;
    assert_eq!(
        restore_of(&again).and_then(|r| r.result),
        Some(PowerRestoreResult::TargetStillRunning)
    );
    assert_eq!(env.power_state().await, "poweredOff");
}

/// An in-process reconciler on the real ports (the controller process is not running): drives
/// a migration step by step, as the work queue would, to the exact point a test needs.
struct Stepper {
    ctx: Arc<ferry_controller::context::Context>,
}

impl Stepper {
    async fn new(env: &Env) -> Stepper {
        ferry_vsphere::tls::install_default_provider();
        let client = env.lab.client().await.unwrap();
        let policy = ferry_controller::policy::Policy {
            converter_image: ferry_harness::LAB_CONVERTER_IMAGE.to_owned(),
            backoff_base: Duration::from_millis(200),
            backoff_cap: Duration::from_secs(2),
            ..Default::default()
        };
        // The controller's own key (its Secret in the kubeconfig's namespace): what it created
        // stays its, whichever process reconciles next.
        let ns = client.default_namespace().to_owned();
        let proof = ferry_controller::children::proof::load_or_create(
            &client,
            &ns,
            ferry_controller::children::proof::DEFAULT_SECRET_NAME,
        )
        .await
        .unwrap();
        Stepper {
            ctx: Arc::new(ferry_controller::context::Context::new(
                client,
                policy,
                Arc::new(ferry_controller::metrics::Metrics::default()),
                proof,
            )),
        }
    }

    /// One reconcile of `name`; returns the migration after it.
    async fn step(&self, env: &Env, name: &str) -> VirtualMachineMigration {
        let obj = env.get(name).await;
        // A conflict or a transient API error is retried by the next step, as the queue would.
        let _ = ferry_controller::reconcile::reconcile(Arc::new(obj), self.ctx.clone()).await;
        env.get(name).await
    }
}

/// Where each migration of the cancel test is stopped and cancelled (or deleted).
#[derive(Clone, Copy, Debug, PartialEq)]
enum At {
    /// Preparing, the source's guest asked to shut down (its VMware Tools running; a hard
    /// power-off hands over to Converting in the reconcile that made it).
    Preparing,
    /// Converting, its Job running.
    Converting,
    /// Importing, a DataVolume made.
    Importing,
    /// CreatingVM, the VM made (made to start: its instance may be there already).
    CreatingVm,
    /// Starting, the VM set to run and its instance there (held unschedulable: an instance
    /// that runs at once takes Starting, and Validating with a ready guest, in one reconcile).
    Starting,
    /// Validating, the instance Running.
    Validating,
}

impl At {
    fn phase(self) -> Phase {
        match self {
            At::Preparing => Phase::Preparing,
            At::Converting => Phase::Converting,
            At::Importing => Phase::Importing,
            At::CreatingVm => Phase::CreatingVM,
            At::Starting => Phase::Starting,
            At::Validating => Phase::Validating,
        }
    }

    /// Whether `v` stands where this stop wants it.
    async fn reached(self, env: &Env, v: &VirtualMachineMigration) -> bool {
        let name = v.name_any();
        if v.phase() != self.phase() {
            return false;
        }
        let s = v.status.clone().unwrap_or_default();
        match self {
            At::Preparing => s.source_power_off.is_some(),
            At::Converting => env
                .ns
                .api::<k8s_openapi::api::batch::v1::Job>()
                .get_opt(&format!("{name}-convert"))
                .await
                .unwrap()
                .is_some(),
            At::Importing => env
                .ns
                .api::<ferry_controller::apis::cdi::DataVolume>()
                .get_opt(&dv_name(&name, 0))
                .await
                .unwrap()
                .is_some(),
            At::CreatingVm => vm_of(env, v).await.is_some(),
            At::Starting => {
                vm_of(env, v)
                    .await
                    .is_some_and(|vm| vm.spec.run_strategy.as_deref() == Some("Always"))
                    && vmi_of(env, v).await.is_some()
            }
            At::Validating => true,
        }
    }
}

/// A cancel in every checkpoint, and a delete in Validating: each migration is driven in
/// process to its point (no controller process meanwhile), cancelled (or deleted), and then the
/// controller process carries the cancel out. The source of each ends powered on (OnCancel),
/// never while its target's instance runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_in_every_phase_and_a_delete_never_overlap_and_power_the_source_on() {
    let mut env = Env::new("power-cancel", 4).await;
    env.sim_args = vec![
        "--speed".into(),
        "10".into(),
        "--throughput-mib".into(),
        "1".into(),
    ];
    env.start_sim();
    let stops = [
        ("c-preparing", At::Preparing, false),
        ("c-converting", At::Converting, false),
        ("c-importing", At::Importing, false),
        ("c-creating", At::CreatingVm, false),
        ("c-starting", At::Starting, false),
        ("c-validating", At::Validating, false),
        ("d-validating", At::Validating, true),
    ];
    let mut runs = vec![];
    for (i, (name, at, delete)) in stops.iter().enumerate() {
        let vm = if i == 0 {
            // Tools running: the guest is asked to shut down first, a step of its own.
            env.shape(&env.vm.name, &["--tools", "running"]);
            env.vm.clone()
        } else {
            env.another_vm(4).0
        };
        let mut vmm = env.migration_of(name, &vm);
        if *at == At::Starting {
            // An instance that stays Scheduling holds the migration in Starting: one that runs
            // at once can be seen Running by the reconcile that follows its making, and that
            // reconcile goes through Validating to Succeeded before this loop looks again.
            vmm = with_fault(vmm, "vmi=permanent");
        }
        if *at == At::Validating {
            // Waiting for a guest agent that never connects holds the migration in Validating,
            // before the release: a Validating whose guest is ready finishes in the reconcile
            // that enters it, leaving no moment to cancel in.
            vmm = with_fault(vmm, "agent=permanent");
            vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
        }
        let sampler = Sampler::start(&env, &vm, &vmm).await;
        env.create(&vmm).await;
        runs.push((*name, *at, *delete, vmm, sampler, vm.moref.clone()));
    }
    let stepper = Stepper::new(&env).await;
    let mut pending: Vec<&str> = runs.iter().map(|r| r.0).collect();
    let mut cancelled_in = vec![];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(400);
    // The work queue's pace: one reconcile of each migration per round.
    let mut round = tokio::time::interval(Duration::from_millis(250));
    while !pending.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not at their points: {pending:?}; logs in {}",
            env.scratch.display()
        );
        round.tick().await;
        let mut still = vec![];
        for name in pending {
            let (_, at, delete, _, _, _) = runs.iter().find(|r| r.0 == name).unwrap();
            // The world moves on its own (the sim): look before each step.
            let v = env.get(name).await;
            assert!(
                !v.phase().is_terminal(),
                "{name} ended before its point: {}",
                serde_yaml_status(&v)
            );
            if at.reached(&env, &v).await {
                if *delete {
                    env.api().delete(name, &Default::default()).await.unwrap();
                } else {
                    env.patch_spec(name, serde_json::json!({"cancel": true}))
                        .await;
                }
                cancelled_in.push((name.to_owned(), v.phase()));
            } else {
                stepper.step(&env, name).await;
                still.push(name);
            }
        }
        pending = still;
    }
    env.start_controller();
    for (name, at, delete, vmm, sampler, moref) in runs {
        if delete {
            env.wait_gone(name, 300).await;
        } else {
            let v = env.wait_phase(name, Phase::Cancelled, 300).await;
            let r = restore_of(&v).unwrap();
            assert_eq!(
                r.result,
                Some(PowerRestoreResult::PoweredOn),
                "{name}: {r:?}"
            );
            assert_eq!(
                v.condition(ConditionType::Ready).unwrap().reason,
                Reason::Cancelled,
                "{name}"
            );
        }
        let seen = sampler.finish().await;
        assert_eq!(seen.both, 0, "{name}: two live copies: {seen:?}");
        assert_eq!(
            power_of(&env, &moref).await,
            "poweredOn",
            "{name}: powered back on"
        );
        if at == At::Validating {
            assert!(seen.target_running > 0, "{name}: its target ran: {seen:?}");
        }
        assert!(
            vmi_of(&env, &vmm).await.is_none(),
            "{name}: the target's instance is gone"
        );
    }
    let hit: std::collections::BTreeSet<Phase> = cancelled_in.iter().map(|(_, p)| *p).collect();
    assert_eq!(
        hit,
        // Cold migrations: every checkpoint but a warm one's CuttingOver (e2e_warm cancels
        // before and the power rule after it) and ConvertingGuest (their guests are not
        // converted).
        Phase::CHECKPOINTS
            .into_iter()
            .filter(|p| !matches!(p, Phase::CuttingOver | Phase::ConvertingGuest))
            .collect(),
        "{cancelled_in:?}"
    );
}

/// The VM's release (Validating's last act) and Succeeded are one status write: the reconcile
/// that released the VM recorded the release and Succeeded together, so no cancel can find the
/// VM released and the migration not done. A cancel arriving right after touches neither copy.
/// (A controller that dies between the release and that write leaves the release unrecorded:
/// the next reconcile finishes again, every step idempotent, as `e2e_crash` kills in Validating.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_right_after_the_release_touches_neither_copy() {
    let mut env = Env::new("power-release", 4).await;
    env.start_sim();
    let mut vmm = env.migration("handover");
    // The agent connects 3 s after the instance runs: Validating waits that long.
    vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    let stepper = Stepper::new(&env).await;
    let vms = env.ns.api::<VirtualMachine>();
    let target = names::vm_name(&vmm);
    // Step by step until the reconcile that released the VM; not one further.
    let validated = std::sync::atomic::AtomicBool::new(false);
    let v = eventually("the VM released", Duration::from_secs(300), || async {
        let v = stepper.step(&env, "handover").await;
        let vm = vms.get_opt(&target).await.ok().flatten()?;
        if vm.owner_references().is_empty() {
            return Some(v);
        }
        assert!(!v.phase().is_terminal(), "{}", serde_yaml_status(&v));
        if v.phase() == Phase::Validating {
            validated.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        None
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert!(
        validated.into_inner(),
        "the guest was waited for in Validating"
    );
    assert_eq!(
        v.phase(),
        Phase::Succeeded,
        "released and Succeeded in one write: {}",
        serde_yaml_status(&v)
    );
    let record = v
        .status
        .as_ref()
        .and_then(|s| ferry_crds::child::find(&s.children, "VirtualMachine", &target).cloned());
    assert!(
        record.as_ref().is_some_and(|r| r.released),
        "the release is recorded with it: {record:?}"
    );
    assert_eq!(env.power_state().await, "poweredOff");
    let after = Sampler::start(&env, &env.vm, &vmm).await;
    env.patch_spec("handover", serde_json::json!({"cancel": true}))
        .await;
    env.start_controller();
    let v = env.wait_phase("handover", Phase::Succeeded, 120).await;
    let seen = sampler.finish().await;
    let since_cancel = after.finish().await;
    assert!(
        v.spec.cancel,
        "the cancel came too late and changed nothing"
    );
    assert_eq!(
        env.power_state().await,
        "poweredOff",
        "the source stays off"
    );
    assert_eq!(seen.both, 0, "{seen:?}");
    assert_eq!(since_cancel.source_on, 0, "{since_cancel:?}");
    assert!(
        since_cancel.samples > 0 && since_cancel.target_running == since_cancel.samples,
        "the migrated VM ran throughout: {since_cancel:?}"
    );
    let vm = vms.get(&target).await.unwrap();
    assert!(vm.metadata.deletion_timestamp.is_none(), "not deleted");
    assert_eq!(
        vm.spec.run_strategy.as_deref(),
        Some("Always"),
        "not halted"
    );
    let vmi = vmi_of(&env, &v).await.unwrap();
    assert!(vmi.metadata.deletion_timestamp.is_none());
    assert_eq!(
        vmi.status.and_then(|s| s.phase),
        Some(VmiPhase::Running),
        "the migrated VM runs on"
    );
}

/// The health gate: the migrated guest is ready, but the port its health check probes never
/// answers. ferry rolls back: the target halted and its instance gone before the source is
/// powered back on (sampled: never both live), `RolledBack` with the probe's answer, the VM and
/// its volumes kept for inspection. Retried while the test plays the guest's service on the
/// instance's address, it migrates again from the source and succeeds on the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_never_answered_rolls_back_and_a_retry_succeeds_once_it_answers() {
    const PORT: u16 = 18080;
    let mut env = Env::new("power-health", 4).await;
    env.sim_args = vec!["--speed".into(), "10".into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = env.migration("gated");
    vmm.spec.target.template.readiness = Some(Readiness::Running);
    vmm.spec.target.template.health_check = Some(
        serde_json::from_value(serde_json::json!({
            "tcp": {"port": PORT}, "timeoutSeconds": 15, "periodSeconds": 1,
        }))
        .unwrap(),
    );
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    let v = wait_settled(&env, "gated", 300).await;
    let seen = sampler.finish().await;
    assert_eq!(v.phase(), Phase::RolledBack, "{}", serde_yaml_status(&v));
    let status = v.status.as_ref().unwrap();
    let f = status.last_failure.clone().unwrap();
    assert_eq!(
        (f.phase, f.reason),
        (Phase::Validating, Reason::HealthCheckFailed)
    );
    assert!(
        f.message.contains(&format!(":{PORT}: ")) && f.message.contains("refused"),
        "the probe's answer: {}",
        f.message
    );
    let h = status.health_check.clone().unwrap();
    assert!(h.probes >= 2 && !h.passed, "{h:?}");
    let r = restore_of(&v).unwrap();
    assert_eq!(r.result, Some(PowerRestoreResult::PoweredOn), "{r:?}");
    assert_eq!(env.power_state().await, "poweredOn");
    assert_eq!(
        vm_of(&env, &v).await.unwrap().spec.run_strategy.as_deref(),
        Some("Halted"),
        "the target is kept, stopped"
    );
    assert!(vmi_of(&env, &v).await.is_none());
    let dvs = env
        .ns
        .api::<ferry_controller::apis::cdi::DataVolume>()
        .list(&Default::default())
        .await
        .unwrap();
    assert!(!dvs.items.is_empty(), "the volumes are kept for inspection");
    assert!(
        seen.target_running > 0 && seen.source_on > 0,
        "both were live, one after the other: {seen:?}"
    );
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");

    // Retried: the rollback gave the source its place back, so it is copied again; this time
    // the test answers on the address the new instance reports.
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.patch_spec("gated", serde_json::json!({"retry": 1}))
        .await;
    let ip = eventually(
        "the new instance's address",
        Duration::from_secs(300),
        || async {
            let vmi = vmi_of(&env, &v).await?;
            let status = vmi.status?;
            status.interfaces.iter().find_map(|i| i.ip_address.clone())
        },
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind((ip.as_str(), PORT))
        .await
        .unwrap_or_else(|e| panic!("binding {ip}:{PORT}: {e}"));
    let answered = tokio::spawn(async move {
        let mut n = 0u32;
        while let Ok((conn, _)) = listener.accept().await {
            drop(conn);
            n += 1;
        }
        n
    });
    let v = env.wait_phase("gated", Phase::Succeeded, 300).await;
    let seen = sampler.finish().await;
    answered.abort();
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");
    let status = v.status.as_ref().unwrap();
    assert_eq!(status.attempts, 2);
    let h = status.health_check.clone().unwrap();
    assert!(h.passed && h.last_result.contains("connected"), "{h:?}");
    let ready = ferry_crds::condition::get_condition(&status.conditions, ConditionType::GuestReady)
        .unwrap();
    assert_eq!(ready.reason, Reason::HealthCheckPassed, "{}", ready.message);
}

/// The image a test's hooks name: the sim runs their command on the node without pulling it.
const HOOK_IMAGE: &str = "registry.example/ferry-e2e/hook:1";

/// The hook `point` of `name`'s latest run, from the status.
fn hook_run(v: &VirtualMachineMigration, point: ferry_crds::HookPoint) -> ferry_crds::HookStatus {
    let s = v.status.as_ref().unwrap();
    s.hooks
        .iter()
        .find(|h| h.point == point)
        .cloned()
        .unwrap_or_else(|| panic!("no {point:?} in status.hooks: {:?}", s.hooks))
}

/// What the node's log holds of the hook Job `job`'s pod (all its runs: the sim appends).
fn hook_log(env: &Env, job: &str) -> String {
    let path = env.job_logs().join(job).join("attempt-1.log");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A cold migration of a running VM whose `preCutover` hook fails: the migration fails in
/// Preparing with what the hook said, and the source was never touched (sampled: powered on
/// throughout; no power-off recorded, nothing copied). Its author mends the hook and retries:
/// the hook runs again in the new attempt, and the migration goes on to succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_cutover_hook_that_fails_leaves_the_source_untouched_and_its_retry_runs_it_again() {
    use k8s_openapi::api::batch::v1::Job;
    let mut env = Env::new("power-prehook", 4).await;
    env.sim_args = vec!["--speed".into(), "10".into()];
    env.start_sim();
    env.start_controller();
    assert_eq!(env.power_state().await, "poweredOn");
    let mut vmm = env.migration("hooked");
    vmm.spec.hooks = Some(
        serde_json::from_value(serde_json::json!({"preCutover": {
            "image": HOOK_IMAGE,
            "command": ["sh", "-c", "echo 'the app still has 3 writers' >&2; exit 3"],
            "timeoutSeconds": 120,
        }}))
        .unwrap(),
    );
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    let v = wait_settled(&env, "hooked", 300).await;
    let seen = sampler.finish().await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let status = v.status.as_ref().unwrap();
    let f = status.last_failure.clone().unwrap();
    assert_eq!((f.phase, f.reason), (Phase::Preparing, Reason::HookFailed));
    assert!(
        f.message.contains("3 writers"),
        "what it said: {}",
        f.message
    );
    let run = hook_run(&v, ferry_crds::HookPoint::PreCutover);
    assert_eq!((run.state, run.attempt), (ferry_crds::HookState::Failed, 1));
    assert!(status.source_power_off.is_none(), "no power-off began");
    assert!(
        seen.samples > 0 && seen.source_on == seen.samples,
        "the source ran throughout: {seen:?}"
    );
    assert_eq!(env.power_state().await, "poweredOn");
    let jobs: Vec<String> = env
        .ns
        .api::<Job>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|j| j.name_any())
        .collect();
    assert_eq!(jobs, ["hooked-pre-cutover"], "nothing was copied");

    // Mended and retried: the hook runs again (a new Job of the new attempt) and passes.
    env.patch_spec(
        "hooked",
        serde_json::json!({
            "hooks": {"preCutover": {"command": ["sh", "-c", "echo quiesced"]}},
            "retry": 1,
        }),
    )
    .await;
    let v = env.wait_phase("hooked", Phase::Succeeded, 300).await;
    let run = hook_run(&v, ferry_crds::HookPoint::PreCutover);
    assert_eq!(
        (run.state, run.attempt),
        (ferry_crds::HookState::Succeeded, 2)
    );
    assert!(hook_log(&env, "hooked-pre-cutover").contains("quiesced"));
    let off = v.status.as_ref().unwrap().source_power_off.clone().unwrap();
    let started = run.started_at.unwrap();
    assert!(
        off.shutdown_guest_at
            .as_ref()
            .or(off.hard_power_off_at.as_ref())
            .is_some_and(|t| t.0 >= started.0),
        "the power-off came after the hook: {off:?}, hook {started:?}"
    );
}

/// A `postCutover` hook that fails is a failed check of the migrated VM: rolled back (the target
/// halted, the source powered on again; sampled: never both live). Mended and retried, the hook
/// reads its context file (the migration, the hook, the attempt, the source's ids, the target)
/// and finds no credential in its environment; its Job mounts no Secret and no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_cutover_hook_that_fails_rolls_back_and_its_retry_reads_its_context() {
    use k8s_openapi::api::batch::v1::Job;
    let mut env = Env::new("power-posthook", 4).await;
    env.sim_args = vec!["--speed".into(), "10".into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = env.migration("hooked");
    vmm.spec.target.template.readiness = Some(Readiness::Running);
    vmm.spec.hooks = Some(
        serde_json::from_value(serde_json::json!({"postCutover": {
            "image": HOOK_IMAGE,
            "command": ["sh", "-c", "echo 'the app does not answer on :8080'; exit 1"],
        }}))
        .unwrap(),
    );
    let sampler = Sampler::start(&env, &env.vm, &vmm).await;
    env.create(&vmm).await;
    let v = wait_settled(&env, "hooked", 300).await;
    let seen = sampler.finish().await;
    assert_eq!(v.phase(), Phase::RolledBack, "{}", serde_yaml_status(&v));
    let f = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert_eq!((f.phase, f.reason), (Phase::Validating, Reason::HookFailed));
    assert!(f.message.contains("does not answer"), "{}", f.message);
    assert_eq!(
        restore_of(&v).unwrap().result,
        Some(PowerRestoreResult::PoweredOn)
    );
    assert_eq!(env.power_state().await, "poweredOn");
    assert!(vmi_of(&env, &v).await.is_none(), "the target is stopped");
    assert!(seen.target_running > 0 && seen.source_on > 0, "{seen:?}");
    assert_eq!(seen.both, 0, "two live copies: {seen:?}");

    // Mended: it prints its context and fails on any credential in its environment.
    let check = "cat \"$FERRY_HOOK_CONTEXT\"; echo; \
                 if env | grep -iE 'password|secret|token|^aws_|^vsphere'; then exit 1; fi; \
                 echo no-credentials";
    env.patch_spec(
        "hooked",
        serde_json::json!({
            "hooks": {"postCutover": {"command": ["sh", "-c", check]}},
            "retry": 1,
        }),
    )
    .await;
    let v = env.wait_phase("hooked", Phase::Succeeded, 300).await;
    let run = hook_run(&v, ferry_crds::HookPoint::PostCutover);
    assert_eq!(
        (run.state, run.attempt),
        (ferry_crds::HookState::Succeeded, 2)
    );
    let log = hook_log(&env, "hooked-post-cutover");
    assert!(log.contains("no-credentials"), "{log}");
    let context: serde_json::Value = log
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no context in the hook's log: {log}"));
    assert_eq!(context["hook"], "postCutover", "{context}");
    assert_eq!(context["migration"]["name"], "hooked");
    assert_eq!(context["migration"]["attempt"], 2);
    assert_eq!(context["migration"]["phase"], "Validating");
    assert_eq!(context["source"]["moref"], env.vm.moref.as_str());
    assert_eq!(context["target"]["name"], names::vm_name(&v).as_str());
    let job = env
        .ns
        .api::<Job>()
        .get("hooked-post-cutover")
        .await
        .unwrap();
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert!(
        pod.volumes
            .iter()
            .flatten()
            .all(|v| v.secret.is_none() && v.projected.is_none()),
        "{:?}",
        pod.volumes
    );
    assert!(
        pod.containers[0]
            .env
            .iter()
            .flatten()
            .all(|e| e.value_from.is_none()),
        "no Secret in its environment"
    );
}
