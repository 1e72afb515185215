//! One namespace per test, removed afterwards.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

use crate::{Lab, Result};

/// A namespace created for one test. Dropping it asks the apiserver to delete it (without
/// waiting: the namespace controller finishes the job while other tests run).
pub struct TestNamespace {
    pub name: String,
    pub client: kube::Client,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace").field("name", &self.name).finish()
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
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
        Ok(TestNamespace { name, client })
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
        let client = self.client.clone();
        let name = self.name.clone();
        // Drop cannot await and may run outside any runtime (or inside one that is shutting
        // down), so the delete runs on a small runtime of its own.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async move {
                let _ = Api::<Namespace>::all(client).delete(&name, &DeleteParams::background()).await;
            });
        })
        .join();
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
