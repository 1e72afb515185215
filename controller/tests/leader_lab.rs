//! The elector against the lab's apiserver, in process: of candidates racing for one Lease
//! exactly one wins and only its fence opens; a released Lease is taken at once; a leader whose
//! renewals stop is fenced at its renew deadline, before the lease duration lets another in.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use ferry_controller::leader::{ElectionConfig, Elector, Fence, Lost};
use ferry_harness::lab;
use prometheus_client::metrics::counter::Counter;

fn config(ns: &str, lease: &str, me: &str) -> ElectionConfig {
    ElectionConfig {
        lease_name: lease.into(),
        namespace: ns.into(),
        identity: me.into(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_racing_candidates_wins_and_only_its_fence_opens() {
    ferry_vsphere::tls::install_default_provider();
    let lab = lab();
    let ns = lab.namespace("leader-race").await.unwrap();
    let client = lab.client().await.unwrap();
    let mut electors: Vec<(Elector, Fence)> = (0..4)
        .map(|i| {
            let fence = Fence::elected(Counter::default());
            let e = Elector::new(
                client.clone(),
                config(&ns.name, "race", &format!("c{i}")),
                fence.clone(),
            );
            (e, fence)
        })
        .collect();
    // Every candidate tries at once, several rounds: one holds it, the others see it held.
    let mut winners = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let rounds = futures::future::join_all(
            electors
                .iter_mut()
                .map(|(e, _)| async move { e.try_acquire_or_renew().await.unwrap() }),
        )
        .await;
        for (i, won) in rounds.iter().enumerate() {
            if *won {
                winners.insert(i);
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner: {winners:?}");
    let w = *winners.iter().next().unwrap();
    for (i, (_, f)) in electors.iter().enumerate() {
        assert_eq!(f.allows_writes(), i == w, "fence of c{i}");
    }
    // The winner gives it up: the next candidate takes it at once (no lease duration to wait).
    let (mut winner, wfence) = electors.remove(w);
    winner.release().await;
    assert!(!wfence.allows_writes());
    let nfence = electors[0].1.clone();
    let next = &mut electors[0].0;
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), next.acquire())
        .await
        .expect("a released lease is taken at once");
    println!("takeover after release: {:?}", t.elapsed());
    assert!(nfence.allows_writes());
    // A leader that stops renewing is fenced at its renew deadline, while the lease still keeps
    // the others out.
    let limit = nfence.limit().unwrap();
    let other = &mut electors[1].0;
    assert!(
        !other.try_acquire_or_renew().await.unwrap(),
        "held, not expired"
    );
    tokio::time::sleep_until(limit.into()).await;
    assert!(!nfence.allows_writes(), "fenced at the renew deadline");
    assert!(
        !other.try_acquire_or_renew().await.unwrap(),
        "the lease still keeps others out past the renew deadline"
    );
    // Held by someone else once the lease expired as the others observed it.
    let lost = {
        let (other, ofence) = &mut electors[1];
        tokio::time::timeout(Duration::from_secs(20), other.acquire())
            .await
            .unwrap();
        assert!(ofence.allows_writes());
        let (old, _) = &mut electors[0];
        tokio::time::timeout(Duration::from_secs(10), old.hold())
            .await
            .unwrap()
    };
    // It had stopped renewing: its own clock already says the lease is gone.
    assert_eq!(lost, Lost::Expired);
}
