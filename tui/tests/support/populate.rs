//! Puts fixture migrations and waves into a cluster with their status, many requests at once:
//! what the benchmark and the captured screens start from.

use std::collections::BTreeSet;

use ferry_crds::{MigrationWave, VirtualMachineMigration};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};

fn fresh<K: kube::Resource>(o: &mut K) {
    let m = o.meta_mut();
    m.uid = None;
    m.resource_version = None;
    m.creation_timestamp = None;
    m.generation = None;
    m.managed_fields = None;
}

/// Moves every timestamp in `v` by `secs` (the fixtures live around 2026-01-01; a board wants
/// them around now).
pub fn shift_times(v: &mut serde_json::Value, secs: i64) {
    match v {
        serde_json::Value::String(s) => {
            if let Ok(t) = s.parse::<k8s_openapi::jiff::Timestamp>()
                && let Ok(moved) = t.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
            {
                *s = moved.to_string();
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| shift_times(x, secs)),
        serde_json::Value::Object(m) => m.values_mut().for_each(|x| shift_times(x, secs)),
        _ => {}
    }
}

fn status_patch<S: serde::Serialize>(s: &S, shift: i64) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    shift_times(&mut v, shift);
    serde_json::json!({ "status": v })
}

/// Creates every namespace the objects name, then each object followed by its status (through
/// the status subresource, its times moved by `shift` seconds), `concurrency` at a time.
/// Returns how many migrations were written.
pub async fn populate(
    client: &Client,
    vmms: Vec<VirtualMachineMigration>,
    waves: Vec<MigrationWave>,
    concurrency: usize,
    shift: i64,
) -> anyhow::Result<usize> {
    let namespaces: BTreeSet<String> = vmms
        .iter()
        .filter_map(|o| o.namespace())
        .chain(waves.iter().filter_map(|w| w.namespace()))
        .collect();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces {
        let mut n = Namespace::default();
        n.metadata.name = Some(ns);
        match ns_api.create(&PostParams::default(), &n).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for mut w in waves {
        let ns = w.namespace().unwrap_or_default();
        let api: Api<MigrationWave> = Api::namespaced(client.clone(), &ns);
        let status = w.status.take();
        fresh(&mut w);
        api.create(&PostParams::default(), &w).await?;
        if let Some(s) = status {
            api.patch_status(
                &w.name_any(),
                &PatchParams::default(),
                &Patch::Merge(status_patch(&s, shift)),
            )
            .await?;
        }
    }
    let results: Vec<anyhow::Result<()>> = stream::iter(vmms)
        .map(|mut o| {
            let client = client.clone();
            async move {
                let ns = o.namespace().unwrap_or_default();
                let api: Api<VirtualMachineMigration> = Api::namespaced(client, &ns);
                let status = o.status.take();
                fresh(&mut o);
                api.create(&PostParams::default(), &o).await?;
                if let Some(s) = status {
                    api.patch_status(
                        &o.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(status_patch(&s, shift)),
                    )
                    .await?;
                }
                Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let n = results.len();
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    Ok(n)
}
