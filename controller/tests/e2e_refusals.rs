//! End to end, every refusal from the API server is seen at once: a create of ferry's that a
//! ResourceQuota refuses waits with `QuotaExceeded` (the quota's words in the condition and an
//! Event) and goes on when the quota is raised; one an admission policy denies shows
//! `AdmissionDenied` with the policy's words, then fails the migration after a few tries; a wave
//! with one member a policy refuses makes and runs every other member and names the refused one
//! in its status. The policies are hand-made here, bound to the test's namespace only (the lab
//! is shared) and deleted at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use ferry_crds::{
    ConditionType, MigrationWave, MigrationWaveSpec, Phase, Reason, VirtualMachineMigration, WaveVm,
};
use ferry_harness::eventually;
use kube::Api;
use kube::api::PostParams;

/// `kubectl ARGS` against the lab (stdin `input`), its stdout; panics with its stderr.
fn kubectl(env: &Env, args: &[&str], input: Option<&str>) -> String {
    use std::io::Write;
    let mut cmd = env.lab.kubectl();
    cmd.args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(text) = input {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A ValidatingAdmissionPolicy and its binding, in force in `env`'s namespace only, deleted on
/// drop.
struct Policy {
    lab: &'static ferry_harness::Lab,
    name: String,
}

impl Policy {
    /// Denies CREATEs of `resource` (`group`/`v1`) for which `allowed` (CEL) is false, with
    /// `message`; waits until the API server enforces it (`probe`, a manifest that must be
    /// refused, tried as a server-side dry run).
    async fn deny(
        env: &Env,
        what: &str,
        (group, resource): (&str, &str),
        allowed: &str,
        message: &str,
        probe: &str,
    ) -> Policy {
        let name = format!("{}-{what}", env.ns.name);
        let ns = &env.ns.name;
        let yaml = format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["{group}"]
      apiVersions: ["*"]
      operations: ["CREATE"]
      resources: ["{resource}"]
  validations:
  - expression: "{allowed}"
    message: "{message}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {ns}}}
"#
        );
        kubectl(env, &["apply", "-f", "-"], Some(&yaml));
        // Deleted however the wait below ends.
        let policy = Policy {
            lab: env.lab,
            name: name.clone(),
        };
        // The API server takes the policy up in its own time: wait until it refuses.
        let said = std::sync::Mutex::new(String::new());
        let enforced = eventually(
            &format!("policy {name} in force"),
            Duration::from_secs(60),
            || async {
                let out = env
                    .lab
                    .kubectl()
                    .args(["-n", ns, "create", "--dry-run=server", "-f", "-"])
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .and_then(|mut c| {
                        use std::io::Write;
                        c.stdin.take().unwrap().write_all(probe.as_bytes())?;
                        c.wait_with_output()
                    })
                    .unwrap();
                let text = String::from_utf8_lossy(&out.stderr).into_owned();
                let refused = !out.status.success() && text.contains(message);
                *said.lock().unwrap() = text;
                refused.then_some(())
            },
        )
        .await;
        if let Err(e) = enforced {
            panic!("{e}; the probe's last answer: {}", said.lock().unwrap());
        }
        policy
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = self
            .lab
            .kubectl()
            .args([
                "delete",
                "--ignore-not-found",
                &format!("validatingadmissionpolicybinding/{}", self.name),
                &format!("validatingadmissionpolicy/{}", self.name),
            ])
            .output();
    }
}

/// A Job named like a converter's, to probe a policy with.
fn probe_job(name: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: registry.ferry.test/probe@sha256:0000000000000000000000000000000000000000000000000000000000000000}}]
"#
    )
}

/// The condition `t` of the migration.
fn condition(v: &VirtualMachineMigration, t: ConditionType) -> Option<(Reason, String)> {
    v.condition(t).map(|c| (c.reason, c.message.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_refusal_waits_in_status_and_goes_on_when_the_quota_is_raised() {
    let mut env = Env::new("e2e-refused-quota", 8).await;
    let ns = env.ns.name.clone();
    kubectl(
        &env,
        &[
            "-n",
            &ns,
            "create",
            "quota",
            "jobs",
            "--hard=count/jobs.batch=0",
        ],
        None,
    );
    // The quota admits nothing until its controller has counted what is there.
    eventually("the quota counted", Duration::from_secs(60), || async {
        let used = kubectl(
            &env,
            &[
                "-n",
                &ns,
                "get",
                "quota",
                "jobs",
                "-o",
                "jsonpath={.status.used}",
            ],
            None,
        );
        (!used.is_empty()).then_some(())
    })
    .await
    .unwrap();
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("quota")).await;
    let waiting = env
        .wait_for("quota", "QuotaExceeded in status", 120, |v| {
            condition(v, ConditionType::DiskConverted)
                .is_some_and(|(r, _)| r == Reason::QuotaExceeded)
        })
        .await;
    let (_, message) = condition(&waiting, ConditionType::DiskConverted).unwrap();
    for words in [
        "exceeded quota: jobs",
        "count/jobs.batch=0",
        "until the quota allows it",
    ] {
        assert!(message.contains(words), "{words:?} in {message}");
    }
    env.wait_event("quota", "QuotaExceeded").await;
    // It waits, whatever the retry budget: past it, still not failed.
    let budget = 8 + 2;
    env.wait_for("quota", "retried past the policy's budget", 120, |v| {
        v.status.as_ref().is_some_and(|s| s.retries >= budget)
    })
    .await;
    assert_eq!(env.get("quota").await.phase(), Phase::Converting);

    kubectl(
        &env,
        &[
            "-n",
            &ns,
            "patch",
            "quota",
            "jobs",
            "--type=merge",
            "-p",
            r#"{"spec":{"hard":{"count/jobs.batch":"5"}}}"#,
        ],
        None,
    );
    let done = env.wait_terminal("quota", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_denial_is_in_status_at_once_and_fails_the_migration_after_a_few_tries() {
    const SAYS: &str = "converter Jobs are not allowed in this namespace (test policy)";
    let mut env = Env::new("e2e-refused-policy", 8).await;
    let _policy = Policy::deny(
        &env,
        "no-convert",
        ("batch", "jobs"),
        "!object.metadata.name.endsWith('-convert')",
        SAYS,
        &probe_job("probe-convert"),
    )
    .await;
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("denied")).await;
    let seen = env
        .wait_for("denied", "AdmissionDenied in status", 120, |v| {
            condition(v, ConditionType::DiskConverted)
                .is_some_and(|(r, _)| r == Reason::AdmissionDenied)
                || v.phase() == Phase::Failed
        })
        .await;
    let (_, message) = condition(&seen, ConditionType::DiskConverted).unwrap();
    assert!(
        message.contains(SAYS) && message.contains("ValidatingAdmissionPolicy"),
        "the policy's words whole: {message}"
    );
    env.wait_event("denied", "AdmissionDenied").await;
    let done = env.wait_terminal("denied", 120).await;
    assert_eq!(done.phase(), Phase::Failed, "{}", serde_yaml_status(&done));
    let f = done.status.unwrap().last_failure.unwrap();
    assert_eq!(f.reason, Reason::AdmissionDenied);
    assert!(f.message.contains(SAYS), "{}", f.message);
    assert!(
        f.message.contains("gave up after 3 retries"),
        "a few tries, then failed: {}",
        f.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_makes_and_runs_every_member_but_the_one_a_policy_refuses_and_names_it() {
    const SAYS: &str = "this VM may not be migrated here (test policy)";
    let mut env = Env::new("e2e-refused-wave", 8).await;
    let (second, third) = (env.lab.claim_vm().unwrap(), env.lab.claim_vm().unwrap());
    for (vm, seed) in [(&second, 2), (&third, 3)] {
        ferry_harness::put_vmdk(vm, &env.scratch.join(&vm.name), 8, seed).unwrap();
    }
    let refused_vm = second.name.clone();
    let probe = {
        let mut m = env.migration("probe");
        m.spec.source.vm = ferry_crds::VmSelector::by_name(refused_vm.clone());
        m.metadata.namespace = Some(env.ns.name.clone());
        serde_yaml::to_string(&m).unwrap()
    };
    let _policy = Policy::deny(
        &env,
        "no-vm",
        ("migration.platform.example", "virtualmachinemigrations"),
        &format!("!has(object.spec.source.name) || object.spec.source.name != '{refused_vm}'"),
        SAYS,
        &probe,
    )
    .await;
    env.start_sim();
    env.start_controller();
    let spec = MigrationWaveSpec {
        template: env.wave_template(),
        vms: [env.vm.name.clone(), refused_vm.clone(), third.name.clone()]
            .into_iter()
            .map(WaveVm::by_name)
            .collect(),
        max_in_flight: 3,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("w", spec))
        .await
        .unwrap();
    let named = wait_wave(&env, "w", "the refused member named", |w| {
        w.status.as_ref().is_some_and(|s| !s.refused.is_empty())
    })
    .await;
    let r = &named.status.as_ref().unwrap().refused[0];
    assert_eq!((r.index, r.vm.as_str()), (1, refused_vm.as_str()));
    assert_eq!(r.reason, Reason::AdmissionDenied);
    assert!(r.message.contains(SAYS), "{}", r.message);
    let degraded = named
        .status
        .as_ref()
        .unwrap()
        .condition(ferry_crds::condition::WaveConditionType::Degraded)
        .unwrap();
    assert_eq!(degraded.reason, Reason::AdmissionDenied);
    for vm in [&env.vm.name, &third.name] {
        let done = env.wait_terminal(&wave_child("w", vm), 300).await;
        assert_eq!(
            done.phase(),
            Phase::Succeeded,
            "{}",
            serde_yaml_status(&done)
        );
    }
    let ended = wait_wave(&env, "w", "the wave to end", |w| {
        w.status.as_ref().is_some_and(|s| s.phase.is_terminal())
    })
    .await;
    let s = ended.status.unwrap();
    assert_eq!(s.phase, ferry_crds::WavePhase::Failed);
    assert_eq!(s.counts.succeeded, 2);
    assert_eq!(s.refused.len(), 1, "still named");
    let vmms: Api<VirtualMachineMigration> = env.ns.api();
    assert!(
        vmms.get_opt(&wave_child("w", &refused_vm))
            .await
            .unwrap()
            .is_none()
    );
}
