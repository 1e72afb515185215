//! One namespace per test, removed afterwards.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::{Lab, Result};

/// A namespace created for one test. Dropping it asks the apiserver to delete it (without
/// waiting: the namespace controller finishes the job while other tests run).
pub struct TestNamespace {
    pub name: String,
    pub client: kube::Client,
    kubeconfig: std::path::PathBuf,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .finish()
    }
}

impl TestNamespace {
    pub(crate) async fn create(lab: &Lab, prefix: &str) -> Result<Self> {
        let client = lab.client().await?;
        let name = format!("{}-{}", sanitize(prefix), suffix());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("ferry.test/suite".to_string(), sanitize(prefix))].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(TestNamespace {
            name,
            client,
            kubeconfig: lab.info.kubeconfig.clone(),
        })
    }

    /// A typed API in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Not through `self.client`: its connection task lives on the test's runtime, which is
        // blocked right here (or already gone), so awaiting it would deadlock. kubectl is a
        // separate process and needs no runtime.
        let _ = std::process::Command::new(crate::repo_root().join("target/lab/bin/kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn sanitize(prefix: &str) -> String {
    let s: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    s.trim_matches('-').to_string()
}

fn suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", (std::process::id() ^ nanos) & 0xfff, n)
}
