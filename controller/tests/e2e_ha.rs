//! End to end, two controller replicas under leader election against the lab: one leads, the
//! other stands by ready; a SIGKILLed leader is replaced within the lease, a SIGTERMed one hands
//! over at once; a leader frozen (SIGSTOP) or cut off from the apiserver past its lease makes no
//! write when it comes back — counted on the apiserver's side, in its audit log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ha;

use std::time::{Duration, Instant};

use common::*;
use ferry_crds::Phase;
use ferry_harness::eventually;
use ha::*;
use k8s_openapi::jiff::Timestamp;

const LEASE_NAME: &str = "ferry-controller";

async fn wait_holder(env: &Env, want: &str, secs: u64) -> Duration {
    let t = Instant::now();
    eventually(
        &format!("{want} to hold the lease"),
        Duration::from_secs(secs),
        || async { (holder(&env.ns.client, &env.ns.name, LEASE_NAME).await == want).then_some(()) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    t.elapsed()
}

async fn wait_ready(r: &Replica, body: &str) {
    eventually(
        &format!("{} /readyz 200 {body:?}", r.name),
        Duration::from_secs(60),
        || async {
            let (code, b) = r.health("/readyz");
            (code == 200 && b.contains(body)).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; {}'s log:\n{}", r.name, r.log()));
}

fn replica(env: &Env, name: &str, server: Option<&str>) -> Replica {
    let kc = kubeconfig_for(env.lab, &env.scratch, &env.ns.name, name, server);
    Replica::new(name, kc, &env.ns.name, LEASE_NAME, &[], &env.scratch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_from_a_killed_leader_and_at_once_from_a_stopped_one() {
    let mut env = Env::new("e2e-ha-takeover", 8).await;
    // Imports of 8 s: the leader is killed mid-migration.
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    let mut a = replica(&env, "a", None);
    let mut b = replica(&env, "b", None);
    a.start();
    wait_holder(&env, "a", 60).await;
    b.start();
    // The leader is ready once its caches synced; the standby is ready as a standby.
    wait_ready(&a, "ready").await;
    wait_ready(&b, "standby").await;
    assert_eq!(a.metric("ferry_controller_leader"), Some(1.0));
    assert_eq!(b.metric("ferry_controller_leader"), Some(0.0));
    assert_eq!(holder(&env.ns.client, &env.ns.name, LEASE_NAME).await, "a");

    // The leader works; then it dies mid-migration and the standby finishes the job.
    env.create(&env.migration("m1")).await;
    env.wait_phase("m1", Phase::Importing, 180).await;
    a.kill();
    let after_kill = wait_holder(&env, "b", 60).await;
    println!(
        "takeover after SIGKILL: {:.1} s (lease 4 s)",
        after_kill.as_secs_f64()
    );
    wait_ready(&b, "ready").await;
    assert_eq!(b.metric("ferry_controller_leader"), Some(1.0));
    let m1 = env.wait_terminal("m1", 300).await;
    assert_eq!(m1.phase(), Phase::Succeeded, "{}", serde_yaml_status(&m1));

    // A graceful stop releases the lease: the restarted a, now the standby, takes it at once.
    a.start();
    wait_ready(&a, "standby").await;
    let stopped = Instant::now();
    b.signal("TERM");
    let code = b.exit_code(Duration::from_secs(60)).await;
    assert_eq!(code, Some(0), "SIGTERM exits 0; log:\n{}", b.log());
    let handover = wait_holder(&env, "a", 30).await;
    println!(
        "takeover after SIGTERM: {:.2} s from the signal ({:.2} s after the exit)",
        stopped.elapsed().as_secs_f64(),
        handover.as_secs_f64()
    );
    assert!(b.log().contains("lease released"), "{}", b.log());
    wait_ready(&a, "ready").await;
    let second = env.lab.claim_vm().unwrap();
    ferry_harness::put_vmdk(&second, &env.scratch.join("second"), 8, 7).unwrap();
    let mut m2 = env.migration("m2");
    m2.spec.source.vm = ferry_crds::VmSelector::by_name(second.name.clone());
    env.create(&m2).await;
    let m2 = env.wait_terminal("m2", 300).await;
    assert_eq!(m2.phase(), Phase::Succeeded, "{}", serde_yaml_status(&m2));
}

/// A leader made to lose its lease by `freeze` (and come back by `thaw`) makes no write after
/// the standby took over, as the apiserver saw it; it exits to come back as a standby; the
/// migration it was driving finishes under the new leader.
async fn old_leader_is_fenced(
    prefix: &str,
    freeze: impl Fn(&Replica),
    thaw: impl Fn(&Replica),
    a: impl FnOnce(&Env) -> Replica,
    env: &mut Env,
) {
    let mut a = a(env);
    let mut b = replica(env, "b", None);
    a.start();
    wait_holder(env, "a", 60).await;
    wait_ready(&a, "ready").await;
    b.start();
    wait_ready(&b, "standby").await;
    env.create(&env.migration("m")).await;
    // Slow import: the leader writes progress while it is frozen.
    env.wait_phase("m", Phase::Importing, 180).await;
    let before = audited_writes(env.lab, &user_of(&env.ns.name, "a"), Timestamp::UNIX_EPOCH).len();
    assert!(before > 0, "the audit log shows a's writes");
    freeze(&a);
    let took = wait_holder(env, "b", 60).await;
    let taken_at = Timestamp::now();
    println!(
        "{prefix}: b took over {:.1} s after a was cut off",
        took.as_secs_f64()
    );
    // b acts as the leader before a comes back.
    eventually("b to write", Duration::from_secs(60), || async {
        (!audited_writes(env.lab, &user_of(&env.ns.name, "b"), taken_at).is_empty()).then_some(())
    })
    .await
    .unwrap();
    thaw(&a);
    let code = a.exit_code(Duration::from_secs(60)).await;
    assert_eq!(
        code,
        Some(3),
        "a exits on the lost lease; log:\n{}",
        a.log()
    );
    let after = audited_writes(env.lab, &user_of(&env.ns.name, "a"), taken_at);
    println!(
        "{prefix}: a's writes: {before} before, {} after b took over; fenced (refused in a): {}",
        after.len(),
        a.log().matches("write refused").count()
    );
    assert!(
        after.is_empty(),
        "a wrote after losing the lease: {after:?}"
    );
    let m = env.wait_terminal("m", 300).await;
    assert_eq!(m.phase(), Phase::Succeeded, "{}", serde_yaml_status(&m));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_past_its_lease_makes_no_write_when_it_resumes() {
    let mut env = Env::new("e2e-ha-sigstop", 24).await;
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    old_leader_is_fenced(
        "SIGSTOP",
        |a| a.signal("STOP"),
        |a| a.signal("CONT"),
        |env| replica(env, "a", None),
        &mut env,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_apiserver_makes_no_write_when_it_is_back() {
    let mut env = Env::new("e2e-ha-netcut", 24).await;
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    let proxy = Proxy::start(apiserver_addr(env.lab)).await;
    let url = proxy.url();
    old_leader_is_fenced(
        "network cut",
        |_| proxy.sever(),
        |_| proxy.heal(),
        |env| replica(env, "a", Some(&url)),
        &mut env,
    )
    .await;
}
