//! The lab as a whole: it stops without leaving a process behind, and a restart on the same
//! state directory brings back the same cluster at the same address.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

use ferry_harness::{Lab, run_state_dir};

/// Processes whose command line mentions `needle` (the lab passes its state dir to every child).
fn processes_mentioning(needle: &Path) -> Vec<String> {
    let needle = needle.to_string_lossy().into_owned();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&needle) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

#[tokio::test]
async fn lab_stops_cleanly_and_restarts_on_the_same_address_with_its_data() {
    let dir = run_state_dir("lifecycle");

    let first = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || Lab::start(&dir, 4)
    })
    .await
    .unwrap()
    .unwrap();
    let url = first.info.apiserver.url.clone();
    let client = first.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(
        &PostParams::default(),
        &ConfigMap {
            metadata: ObjectMeta {
                name: Some("survives-restart".into()),
                ..ObjectMeta::default()
            },
            data: Some([("k".to_string(), "v".to_string())].into()),
            ..ConfigMap::default()
        },
    )
    .await
    .unwrap();
    assert!(
        !processes_mentioning(&dir).is_empty(),
        "the lab's children should name its state dir"
    );

    tokio::task::spawn_blocking(move || first.stop())
        .await
        .unwrap()
        .unwrap();
    let left = processes_mentioning(&dir);
    assert!(
        left.is_empty(),
        "processes survived the lab's stop:\n{}",
        left.join("\n")
    );

    let second = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || Lab::start(&dir, 4)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        second.info.apiserver.url, url,
        "a restart must keep the apiserver address"
    );
    let cms: Api<ConfigMap> = Api::namespaced(second.client().await.unwrap(), "default");
    let cm = cms.get("survives-restart").await.unwrap();
    assert_eq!(cm.data.unwrap()["k"], "v");
    tokio::task::spawn_blocking(move || second.stop())
        .await
        .unwrap()
        .unwrap();
    assert!(processes_mentioning(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
