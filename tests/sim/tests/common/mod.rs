//! Shared helpers of the sim's lab tests: a sim process per test namespace, staged objects,
//! condition waits.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use ferry_harness::{ChildGuard, KubeVirt, Lab, TestNamespace, eventually, lab_with, repo_root};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{Attribute, AttributeValue, Attributes, ObjectStore, PutOptions};

pub const WAIT: Duration = Duration::from_secs(90);

/// The lab these tests run on: one without KubeVirt's own code, since they test the sim
/// playing KubeVirt whole.
pub fn sim_lab() -> &'static Lab {
    lab_with(KubeVirt::Absent, "sim-tests", 4)
}

/// One test's world: a namespace, a scratch directory, a running sim.
pub struct World {
    pub lab: &'static Lab,
    pub ns: TestNamespace,
    pub dir: PathBuf,
    pub sim: ChildGuard,
    pub args: Vec<String>,
}

impl World {
    /// A fresh namespace with a sim acting on it, started with `extra` arguments.
    pub async fn new(prefix: &str, extra: &[&str]) -> World {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let lab = sim_lab();
        let ns = lab.namespace(prefix).await.unwrap();
        let dir = repo_root().join("target/sim-tests").join(&ns.name);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let sim = spawn_sim(lab, &ns.name, &dir, &args, 0);
        World {
            lab,
            ns,
            dir,
            sim,
            args,
        }
    }

    pub fn client(&self) -> kube::Client {
        self.ns.client.clone()
    }

    pub fn volume(&self, claim: &str) -> PathBuf {
        self.dir
            .join("volumes")
            .join(&self.ns.name)
            .join(format!("{claim}.img"))
    }

    /// Another sim beside this world's, acting in namespace `ns` with `args`, with its own
    /// volume and bin directories under `<dir>/<tag>` (its log: `<dir>/<tag>/sim-0.log`).
    pub fn spawn_other_sim(&self, tag: &str, ns: &str, args: &[&str]) -> ChildGuard {
        let dir = self.dir.join(tag);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        spawn_sim(self.lab, ns, &dir, &args, 0)
    }

    /// SIGKILLs the sim and starts a new one with the same arguments.
    pub fn restart_sim(&mut self, generation: u32) {
        self.sim.kill();
        self.sim = spawn_sim(self.lab, &self.ns.name, &self.dir, &self.args, generation);
    }

    /// The S3 Secret in CDI's shape (`accessKeyId`, `secretKey`).
    pub async fn s3_secret(&self, name: &str) {
        let s3 = &self.lab.info.s3;
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            string_data: Some(
                [
                    ("accessKeyId".to_string(), s3.access_key.clone()),
                    ("secretKey".to_string(), s3.secret_key.clone()),
                ]
                .into(),
            ),
            ..Secret::default()
        };
        self.ns
            .api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }

    /// Puts `bytes` at `sim-tests/<ns>/<name>` with user metadata `sha256` (or the given
    /// override); returns the `source.s3.url`.
    pub async fn stage(&self, name: &str, bytes: &[u8], sha256: Option<&str>) -> String {
        let s3 = &self.lab.info.s3;
        let key = format!("sim-tests/{}/{name}", self.ns.name);
        let digest = hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
        let mut attrs = Attributes::new();
        attrs.insert(
            Attribute::Metadata("sha256".into()),
            AttributeValue::from(sha256.unwrap_or(&digest).to_string()),
        );
        store()
            .put_opts(
                &ObjectPath::from(key.as_str()),
                bytes.to_vec().into(),
                PutOptions {
                    attributes: attrs,
                    ..PutOptions::default()
                },
            )
            .await
            .unwrap();
        format!("{}/{}/{key}", s3.endpoint.trim_end_matches('/'), s3.bucket)
    }
}

impl Drop for World {
    /// Stops the sim, then releases the claims' `kubernetes.io/pvc-protection` finalizers (which
    /// the sim would release on deletion, but it is gone now) so the namespace can be deleted.
    fn drop(&mut self) {
        self.sim.kill();
        let lab = self.lab;
        let ns = self.ns.name.clone();
        // A client of its own: the test's client serves requests from a task of the test's
        // runtime, which this drop blocks.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(client) = lab.client().await else {
                    return;
                };
                let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client, &ns);
                let Ok(list) = pvcs.list(&ListParams::default()).await else {
                    return;
                };
                for p in list {
                    let patch = serde_json::json!({"metadata": {"finalizers": null}});
                    let _ = pvcs
                        .patch(
                            &p.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await;
                }
            });
        })
        .join();
    }
}

pub fn store() -> Arc<dyn ObjectStore> {
    let s3 = &sim_lab().info.s3;
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(&s3.endpoint)
            .with_bucket_name(&s3.bucket)
            .with_region(&s3.region)
            .with_access_key_id(&s3.access_key)
            .with_secret_access_key(&s3.secret_key)
            .with_allow_http(true)
            .build()
            .unwrap(),
    )
}

fn spawn_sim(
    lab: &Lab,
    ns: &str,
    dir: &std::path::Path,
    args: &[String],
    generation: u32,
) -> ChildGuard {
    let log = std::fs::File::create(dir.join(format!("sim-{generation}.log"))).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry-sim"));
    cmd.arg("--kubeconfig")
        .arg(&lab.info.kubeconfig)
        .args(["--namespace", ns])
        .arg("--volume-dir")
        .arg(dir.join("volumes"))
        .arg("--bin-dir")
        .arg(dir.join("bin"))
        .args(args)
        .env("RUST_LOG", "info,ferry_sim=debug,kube=warn")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    ChildGuard::spawn("ferry-sim", cmd).unwrap()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Deterministic, incompressible-looking content.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Waits until `get` returns an object for which `pred` holds; returns it.
pub async fn wait_for<K, F>(api: &Api<K>, name: &str, what: &str, pred: F) -> K
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: Fn(&K) -> bool,
{
    let api = api.clone();
    let name = name.to_string();
    eventually(what, WAIT, || {
        let api = api.clone();
        let name = name.clone();
        let pred = &pred;
        async move { api.get_opt(&name).await.ok().flatten().filter(|o| pred(o)) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `status.conditions[type=t]` of a JSON object as (status, reason, message).
pub fn condition(obj: &serde_json::Value, t: &str) -> Option<(String, String, String)> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
}
