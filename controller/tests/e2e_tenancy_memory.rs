//! Memory grows with migrations, not with what tenants label: anyone who may create Jobs can give
//! them ferry's labels, and the controller's child watch selects them. 300 suspended Jobs of
//! about 600 KiB each (annotations, pod template annotations and an environment value), labelled
//! as a migration's children but of no migration, grow the controller's resident memory by less
//! than 80 MiB (they were 180 MiB of store before `caches::slim`), and a migration created after
//! them still succeeds; restarted among them, the controller's peak through its first list (50
//! objects a page) stays under the same bound, and it migrates again.
//!
//! The Jobs are in the controller's own namespace: the lab's controllers are scoped to their
//! test's namespace (the lab is shared), and a namespace the controller watches is what
//! matters — a cluster-wide controller watches every namespace alike.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_crds::{Phase, names};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

const JOBS: usize = 300;
const KIB: usize = 200;

/// A suspended Job of about 600 KiB carrying ferry's child labels for a migration that does not
/// exist.
fn tenant_job(i: usize) -> Job {
    let filler = |c: char| std::iter::repeat_n(c, KIB * 1024).collect::<String>();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": format!("tenant-{i}"),
            "labels": {
                names::MIGRATION_LABEL: format!("not-a-migration-{i}"),
                names::MIGRATION_UID_LABEL: format!("00000000-0000-0000-0000-{i:012}"),
                "tenant": "yes",
            },
            "annotations": {"tenant.example/blob": filler('a')},
        },
        "spec": {
            "suspend": true,
            "template": {
                "metadata": {"annotations": {"tenant.example/blob": filler('b')}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"],
                        "env": [{"name": "BLOB", "value": filler('c')}]}],
                },
            },
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_labelled_jobs_cost_the_controller_next_to_nothing() {
    let mut env = Env::new("e2e-tenancy-mem", 16).await;
    env.start_sim();
    env.start_controller();
    // A first migration: the controller has its caches and has done a migration's work.
    env.create(&env.migration("before")).await;
    let v = env.wait_terminal("before", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let idle = env.controller_rss();

    let jobs: Api<Job> = env.ns.api();
    futures::stream::iter(0..JOBS)
        .map(|i| {
            let jobs = jobs.clone();
            async move { jobs.create(&PostParams::default(), &tenant_job(i)).await }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let size = serde_json::to_vec(&tenant_job(0)).unwrap().len();
    assert!(size > 600 * 1000, "each Job is about 600 KiB: {size}");

    // A migration after them: its conversion Job's events follow the 300 in the Job watch, so
    // its success means the controller has taken all of them in.
    let mut after = env.migration("after");
    after.spec.target.name = Some("after-vm".into());
    env.create(&after).await;
    let v = env.wait_terminal("after", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let loaded = env.controller_rss();
    let grown = loaded.saturating_sub(idle);
    eprintln!(
        "controller RSS: {} MiB after a migration, {} MiB with {JOBS} foreign Jobs of {} KiB and a second migration",
        idle >> 20,
        loaded >> 20,
        size >> 10
    );
    assert!(
        grown < 80 << 20,
        "the controller grew by {} MiB with {JOBS} foreign Jobs (from {} to {} MiB)",
        grown >> 20,
        idle >> 20,
        loaded >> 20
    );

    // A restart with the Jobs in place (an upgrade, an eviction, a new leader): the first list
    // takes them in 50 to a page, so the new process's peak stays as low, and it migrates.
    if let Some(c) = env.controller.as_mut() {
        c.kill();
    }
    env.start_controller();
    let mut third = env.migration("restarted");
    third.spec.target.name = Some("restarted-vm".into());
    env.create(&third).await;
    let v = env.wait_terminal("restarted", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let peak = env.controller_peak_rss();
    eprintln!(
        "controller restarted among them: peak RSS {} MiB through its first list and a migration",
        peak >> 20
    );
    assert!(
        peak < idle + (80 << 20),
        "restarted among {JOBS} foreign Jobs, the controller peaked at {} MiB ({} MiB before them)",
        peak >> 20,
        idle >> 20
    );

    // The Jobs go with the test, not only with its namespace: 180 MiB of etcd otherwise lingers
    // until the namespace's deletion ends.
    jobs.delete_collection(
        &DeleteParams::background(),
        &ListParams::default().labels("tenant=yes"),
    )
    .await
    .unwrap();
}
