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

/// The audit's case: Jobs labelled with a live migration's name and uid (it waits, paused, so
/// the controller holds it with work left) are stubs — only children under the names ferry gives
/// that migration are held whole — and migrations carrying large annotations of anyone's are held
/// without them (only ferry's own annotations are kept, on running and settled ones alike).
/// 300 such Jobs of 600 KiB grow the controller by less than 20 MiB, and so do 200 paused
/// migrations of 250 KB each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_labelled_for_a_live_migration_and_annotated_migrations_grow_the_controller_little() {
    const MIGRATIONS: usize = 200;
    let mut env = Env::new("e2e-tenancy-live", 16).await;
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("before")).await;
    let v = env.wait_terminal("before", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let mut held = env.migration("held");
    held.spec.paused = true;
    held.spec.target.name = Some("held-vm".into());
    let held = env.create(&held).await;
    env.wait_for("held", "the paused migration seen", 60, |v| {
        v.status.is_some()
    })
    .await;
    let idle = env.controller_rss();

    let (name, uid) = (
        held.metadata.name.clone().unwrap(),
        held.metadata.uid.clone().unwrap(),
    );
    let jobs: Api<Job> = env.ns.api();
    futures::stream::iter(0..JOBS)
        .map(|i| {
            let jobs = jobs.clone();
            let mut job = tenant_job(i);
            let labels = job.metadata.labels.get_or_insert_with(Default::default);
            labels.insert(names::MIGRATION_LABEL.to_owned(), name.clone());
            labels.insert(names::MIGRATION_UID_LABEL.to_owned(), uid.clone());
            async move { jobs.create(&PostParams::default(), &job).await }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    // Taken in: the stubs and the migrations counted in the controller's metrics.
    let series = |kind: &str, form: &str| {
        format!("ferry_controller_cached_children{{kind=\"{kind}\",form=\"{form}\"}}")
    };
    ferry_harness::eventually(
        "the Jobs taken in",
        std::time::Duration::from_secs(180),
        || async { (env.metric(&series("Job", "stub")) >= JOBS as u64).then_some(()) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; metrics:\n{}", env.metrics_text()));
    let with_jobs = env.controller_rss();

    let blob: String = std::iter::repeat_n('d', 250 * 1000).collect();
    futures::stream::iter(0..MIGRATIONS)
        .map(|i| {
            let mut m = env.migration(&format!("annotated-{i}"));
            m.spec.paused = true;
            m.metadata.annotations =
                Some([("tenant.example/blob".to_owned(), blob.clone())].into());
            let api = env.api();
            async move { api.create(&PostParams::default(), &m).await }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    ferry_harness::eventually(
        "the migrations taken in",
        std::time::Duration::from_secs(180),
        || async {
            let whole = env.metric("ferry_controller_cached_migrations{form=\"whole\"}");
            (whole > MIGRATIONS as u64).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; metrics:\n{}", env.metrics_text()));
    let loaded = env.controller_rss();
    eprintln!(
        "controller RSS: {} MiB with a paused migration, {} MiB with {JOBS} Jobs of 600 KiB labelled for it, {} MiB with {MIGRATIONS} migrations of 250 KB annotations besides",
        idle >> 20,
        with_jobs >> 20,
        loaded >> 20
    );
    for (what, from, to) in [
        ("the labelled Jobs", idle, with_jobs),
        ("the annotated migrations", with_jobs, loaded),
    ] {
        let grown = to.saturating_sub(from);
        assert!(
            grown < 20 << 20,
            "{what} grew the controller by {} MiB (from {} to {} MiB)",
            grown >> 20,
            from >> 20,
            to >> 20
        );
    }
    jobs.delete_collection(
        &DeleteParams::background(),
        &ListParams::default().labels("tenant=yes"),
    )
    .await
    .unwrap();
}
