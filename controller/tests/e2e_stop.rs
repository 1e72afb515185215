//! End to end, stop means stop: a controller given SIGTERM or SIGINT in the middle of a wave —
//! reconciles running, a vSphere session logged in, watches open — exits 0 within
//! [`STOP_BOUND`], and one under leader election releases its Lease on the way out. (The cause
//! of the hang this guards against: a vSphere session dropped by the runtime's own shutdown
//! logs out in its destructor, blocking on a runtime that no longer drives its I/O; the
//! controller now logs its sessions out while the runtime runs, `run::controllers`.)
//!
//! `FERRY_BIN_DIR=target/release` runs it on the release build (`make bench` does).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ha;

use std::time::{Duration, Instant};

use common::*;
use ferry_crds::{MigrationWave, MigrationWaveSpec, Phase, WaveVm};
use ha::*;
use kube::Api;
use kube::api::PostParams;

/// How long a stopped controller may take to exit: generous for a loaded 2-core machine (it
/// takes about 0.1 s here, the in-flight reconciles' end included).
const STOP_BOUND: Duration = Duration::from_secs(10);

const LEASE_NAME: &str = "ferry-controller";

/// A wave of this test's VM and a second one, one at a time, with slow imports: once the first
/// imports, the wave is in its middle (a reconcile may be running, a vSphere session is cached).
async fn wave_in_its_middle(env: &Env, name: &str) {
    let second = env.lab.claim_vm().unwrap();
    ferry_harness::put_vmdk(&second, &env.scratch.join(name), 8, 5).unwrap();
    let spec = MigrationWaveSpec {
        template: env.wave_template(),
        vms: [env.vm.name.clone(), second.name.clone()]
            .into_iter()
            .map(WaveVm::by_name)
            .collect(),
        max_in_flight: 1,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new(name, spec))
        .await
        .unwrap();
    env.wait_phase(&wave_child(name, &env.vm.name), Phase::Importing, 240)
        .await;
}

/// Sends `sig` to the process `pid`.
fn signal(pid: u32, sig: &str) {
    let st = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -{sig} {pid}");
}

/// The single replica (no election: what `make demo` and the cockpit's `ferry controller`
/// without a Lease run): SIGTERM mid-wave, out within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_controller_exits_promptly_on_sigterm_in_the_middle_of_a_wave() {
    let mut env = Env::new("e2e-stop-lone", 8).await;
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    env.start_controller();
    wave_in_its_middle(&env, "lone").await;
    let ctl = env.controller.as_mut().expect("running");
    let pid = ctl.id().expect("a pid");
    let sent = Instant::now();
    signal(pid, "TERM");
    let mut exited = None;
    while sent.elapsed() < STOP_BOUND {
        if !ctl.running() {
            exited = Some(sent.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = env.controller_log();
    let took =
        exited.unwrap_or_else(|| panic!("still running {STOP_BOUND:?} after SIGTERM; log:\n{log}"));
    let code = env
        .controller
        .take()
        .unwrap()
        .terminate()
        .and_then(|s| s.code());
    println!(
        "lone controller: out {:.2} s after SIGTERM",
        took.as_secs_f64()
    );
    assert_eq!(code, Some(0), "SIGTERM exits 0; log:\n{log}");
    assert!(log.contains("logged out of vSphere"), "{log}");
    assert!(log.contains("controllers stopped"), "{log}");
}

/// Under leader election, each signal in turn: the leader exits 0 within the bound, says it
/// released the Lease, and the Lease has no holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elected_controller_exits_promptly_on_sigterm_and_sigint_and_releases_its_lease() {
    let mut env = Env::new("e2e-stop-elected", 8).await;
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    for (n, sig) in ["TERM", "INT"].into_iter().enumerate() {
        let name = format!("r{n}");
        let kc = kubeconfig_for(env.lab, &env.scratch, &env.ns.name, &name, None);
        let mut r = Replica::new(&name, kc, &env.ns.name, LEASE_NAME, &[], &env.scratch);
        r.start();
        ferry_harness::eventually(
            &format!("{name} to lead"),
            Duration::from_secs(60),
            || async {
                (holder(&env.ns.client, &env.ns.name, LEASE_NAME).await == name).then_some(())
            },
        )
        .await
        .unwrap();
        if n == 0 {
            wave_in_its_middle(&env, "elected").await;
        } else {
            // The wave's first child is still importing (1 MiB/s): the new leader takes it up.
            ferry_harness::eventually(
                &format!("{name} to reconcile the wave's child"),
                Duration::from_secs(60),
                || async { r.log().contains("caches synced").then_some(()) },
            )
            .await
            .unwrap();
        }
        let sent = Instant::now();
        r.signal(sig);
        let code = r.exit_code(STOP_BOUND).await;
        let took = sent.elapsed();
        assert_eq!(
            code,
            Some(0),
            "SIG{sig}: exit 0 within {STOP_BOUND:?}; log:\n{}",
            r.log()
        );
        println!(
            "elected controller: out {:.2} s after SIG{sig}",
            took.as_secs_f64()
        );
        assert!(r.log().contains("lease released"), "{}", r.log());
        assert_eq!(
            holder(&env.ns.client, &env.ns.name, LEASE_NAME).await,
            "",
            "SIG{sig}: the Lease released"
        );
    }
}
