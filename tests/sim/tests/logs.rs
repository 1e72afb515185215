//! `pods/log` in the lab: the apiserver proxies it to the kubelet endpoint of the pod's node,
//! which ferry-sim serves from the log of the Job attempt it ran (`src/kubelet.rs`).
//!
//! Each test gives its sim a node of its own: the other tests' sims share `sim-node`, take it
//! when they start and leave it when they are killed, so a log read through `sim-node` could
//! land on a sim that just went away.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{WAIT, World, wait_for};
use ferry_harness::eventually;
use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

/// A node name no other test uses.
fn node_name(tag: &str) -> String {
    format!("logs-{tag}-{}", std::process::id())
}

fn job(name: &str, script: &str) -> Job {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "convert", "image": "ferry-converter:dev",
                    "command": ["/bin/sh", "-c", script]
                }]
            }}
        }
    }))
    .unwrap()
}

fn complete(j: &Job) -> bool {
    j.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

/// The pod of the Job's first attempt, once `pred` holds for it.
async fn pod_of(w: &World, job: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
    let pods: Api<Pod> = w.ns.api();
    eventually(what, WAIT, || {
        let pods = pods.clone();
        let pred = &pred;
        async move {
            let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"));
            pods.list(&lp)
                .await
                .ok()?
                .items
                .into_iter()
                .find(|p| pred(p))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap()
}

/// The kubelet port the Node names, once it exists.
async fn node_port(w: &World, node: &str, what: &str, pred: impl Fn(i32) -> bool) -> i32 {
    let nodes: Api<Node> = Api::all(w.client());
    eventually(what, WAIT, || {
        let nodes = nodes.clone();
        let pred = &pred;
        async move {
            let n = nodes.get_opt(node).await.ok()??;
            let port = n.status?.daemon_endpoints?.kubelet_endpoint?.port;
            pred(port).then_some(port)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Stops the world's sim (it would register the Node again) and removes its Node.
async fn remove_node(w: &mut World, node: &str) {
    w.sim.kill();
    let _ = Api::<Node>::all(w.client())
        .delete(node, &DeleteParams::default())
        .await;
}

fn api_code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_log_reads_what_the_jobs_container_printed_as_a_kubelet_serves_it() {
    let node = node_name("read");
    let mut w = World::new("sim-logs", &["--node-name", &node]).await;
    let nodes: Api<Node> = Api::all(w.client());
    let port = node_port(&w, &node, "node registered", |p| p > 0).await;
    let n = nodes.get(&node).await.unwrap();
    let st = n.status.clone().unwrap();
    let addresses: Vec<(String, String)> = st
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert!(addresses.contains(&("InternalIP".into(), "127.0.0.1".into())));
    assert!(addresses.contains(&("Hostname".into(), node.clone())));
    assert!(
        st.conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );
    assert!(port > 0);

    let jobs: Api<Job> = w.ns.api();
    let pods: Api<Pod> = w.ns.api();
    // Real sleeps (the script's, not the sim's): lines a second or more apart.
    let script = "echo line 1; echo line 2; sleep 0.5; echo oops >&2; sleep 3; \
                  echo line 3; sleep 1; echo line 4";
    jobs.create(&PostParams::default(), &job("talker", script))
        .await
        .unwrap();
    let running = pod_of(&w, "talker", "pod Running", |p| phase(p) == "Running").await;
    let pod = name(&running);

    // `kubectl logs -f`: the lines as they come, and the end once the container exits.
    let follow = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let stream = pods.log_stream(&pod, &follow).await.unwrap();
    let lines: Vec<String> = tokio::time::timeout(
        Duration::from_secs(60),
        stream.lines().map(|l| l.unwrap()).collect::<Vec<_>>(),
    )
    .await
    .expect("the followed log ends when the container exits");
    assert_eq!(lines, ["line 1", "line 2", "oops", "line 3", "line 4"]);
    let done = wait_for(&jobs, "talker", "job Complete", complete).await;
    assert_eq!(done.status.unwrap().succeeded, Some(1));

    let logs = |lp: LogParams| {
        let pods = pods.clone();
        let pod = pod.clone();
        async move { pods.logs(&pod, &lp).await }
    };
    let all = "line 1\nline 2\noops\nline 3\nline 4\n";
    assert_eq!(logs(LogParams::default()).await.unwrap(), all);
    assert_eq!(
        logs(LogParams {
            tail_lines: Some(2),
            ..LogParams::default()
        })
        .await
        .unwrap(),
        "line 3\nline 4\n"
    );
    assert_eq!(
        logs(LogParams {
            tail_lines: Some(0),
            ..LogParams::default()
        })
        .await
        .unwrap(),
        ""
    );
    assert_eq!(
        logs(LogParams {
            limit_bytes: Some(9),
            ..LogParams::default()
        })
        .await
        .unwrap(),
        "line 1\nli"
    );
    assert_eq!(
        logs(LogParams {
            since_seconds: Some(3600),
            ..LogParams::default()
        })
        .await
        .unwrap(),
        all
    );
    // Every line with the time its output was read, RFC 3339 with nine digits, in order.
    let stamped = logs(LogParams {
        timestamps: true,
        ..LogParams::default()
    })
    .await
    .unwrap();
    let stamps: Vec<(Timestamp, &str)> = stamped
        .lines()
        .map(|l| {
            let (ts, rest) = l.split_once(' ').unwrap();
            assert_eq!(ts.len(), 30, "{ts}");
            assert!(ts.ends_with('Z'), "{ts}");
            (ts.parse().unwrap(), rest)
        })
        .collect();
    let texts: Vec<&str> = stamps.iter().map(|(_, t)| *t).collect();
    assert_eq!(texts, ["line 1", "line 2", "oops", "line 3", "line 4"]);
    assert!(stamps.windows(2).all(|p| p[0].0 <= p[1].0));
    assert!(stamps[3].0.duration_since(stamps[2].0) >= SignedDuration::from_secs(2));
    // sinceTime (sent in whole seconds) between `oops` and `line 3`.
    let since = stamps[2].0 + SignedDuration::from_secs(1);
    assert_eq!(
        logs(LogParams {
            since_time: Some(since),
            ..LogParams::default()
        })
        .await
        .unwrap(),
        "line 3\nline 4\n"
    );

    // What the apiserver refuses itself, and what the kubelet refuses.
    let e = logs(LogParams {
        container: Some("nope".into()),
        ..LogParams::default()
    })
    .await
    .unwrap_err();
    assert_eq!(api_code(&e).0, 400, "{e}");
    let e = pods
        .logs("no-such-pod", &LogParams::default())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e).0, 404, "{e}");
    let e = logs(LogParams {
        previous: true,
        ..LogParams::default()
    })
    .await
    .unwrap_err();
    assert_eq!(
        api_code(&e),
        (
            400,
            format!("previous terminated container \"convert\" in pod \"{pod}\" not found")
        )
    );

    // A pod waiting for its claim has no log yet: the kubelet's sentence, as a 400.
    let mut waiting = job("waiter", "echo never");
    let spec = waiting
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap();
    spec.volumes = Some(vec![
        serde_json::from_value(
            serde_json::json!({"name": "d", "persistentVolumeClaim": {"claimName": "missing"}}),
        )
        .unwrap(),
    ]);
    spec.containers[0].volume_mounts = Some(vec![
        serde_json::from_value(serde_json::json!({"name": "d", "mountPath": "/d"})).unwrap(),
    ]);
    jobs.create(&PostParams::default(), &waiting).await.unwrap();
    let pending = pod_of(&w, "waiter", "pod ContainerCreating", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .is_some()
    })
    .await;
    let e = pods
        .logs(&name(&pending), &LogParams::default())
        .await
        .unwrap_err();
    assert_eq!(
        api_code(&e),
        (
            400,
            format!(
                "container \"convert\" in pod \"{}\" is waiting to start: ContainerCreating",
                name(&pending)
            )
        )
    );
    remove_node(&mut w, &node).await;
}

/// Accepts the kubelet's self-signed serving certificate (the apiserver does not verify it
/// either without `--kubelet-certificate-authority`), checking only the handshake signatures.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// An HTTPS client for the kubelet endpoint, presenting `identity` if given.
fn kubelet_client(
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)));
    let tls = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .unwrap()
}

fn pem_identity(cert: &Path, key: &Path) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let chain = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (chain, PrivateKeyDer::from_pem_file(key).unwrap())
}

fn pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_endpoint_authenticates_by_client_certificate_and_asks_for_access() {
    // A CA of the test's own beside the lab's in the endpoint's --client-ca-file, and a user of
    // it with no rights on the node.
    let mut ca_params = rcgen::CertificateParams::new(vec![]).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name = rcgen::DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "logs-test-ca");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let mut leaf = rcgen::CertificateParams::new(vec![]).unwrap();
    leaf.distinguished_name = rcgen::DistinguishedName::new();
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "nobody");
    leaf.distinguished_name
        .push(rcgen::DnType::OrganizationName, "devs");
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let nobody_key = rcgen::KeyPair::generate().unwrap();
    let nobody = leaf.signed_by(&nobody_key, &ca).unwrap();
    let lab_ca = std::fs::read_to_string(&common::sim_lab().info.apiserver.ca_file).unwrap();
    let bundle = std::env::temp_dir().join(format!("ferry-sim-logs-ca-{}.pem", std::process::id()));
    std::fs::write(&bundle, format!("{lab_ca}{}", pem(ca.der()))).unwrap();

    let node = node_name("auth");
    let bundle_arg = bundle.display().to_string();
    let mut w = World::new(
        "sim-logs-auth",
        &["--node-name", &node, "--client-ca-file", &bundle_arg],
    )
    .await;
    let jobs: Api<Job> = w.ns.api();
    jobs.create(&PostParams::default(), &job("quiet", "echo secret"))
        .await
        .unwrap();
    wait_for(&jobs, "quiet", "job Complete", complete).await;
    let pod = name(&pod_of(&w, "quiet", "pod Succeeded", |p| phase(p) == "Succeeded").await);
    // Through the apiserver: its kubelet client certificate is the lab CA's.
    let pods: Api<Pod> = w.ns.api();
    assert_eq!(
        pods.logs(&pod, &LogParams::default()).await.unwrap(),
        "secret\n"
    );

    let port = node_port(&w, &node, "node registered", |p| p > 0).await;
    let url = |rest: &str| {
        format!(
            "https://127.0.0.1:{port}/containerLogs/{}/{rest}",
            w.ns.name
        )
    };
    let pki = w.lab.info.state_dir.join("pki");
    let admin = kubelet_client(Some(pem_identity(
        &pki.join("admin.crt"),
        &pki.join("admin.key"),
    )));
    let ask = |client: reqwest::Client, url: String| async move {
        let r = client.get(&url).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    let logs = url(&format!("{pod}/convert"));
    assert_eq!(
        ask(kubelet_client(None), logs.clone()).await,
        (401, "Unauthorized".into()),
        "no certificate"
    );
    let other_ca = kubelet_client(Some(pem_identity(
        &pki.join("s3-tls.crt"),
        &pki.join("s3-tls.key"),
    )));
    assert_eq!(
        ask(other_ca, logs.clone()).await,
        (401, "Unauthorized".into()),
        "a certificate of a CA the endpoint does not trust"
    );
    let nobody = kubelet_client(Some((
        vec![nobody.der().clone()],
        PrivateKeyDer::Pkcs8(nobody_key.serialize_der().into()),
    )));
    assert_eq!(
        ask(nobody, logs.clone()).await,
        (
            403,
            "Forbidden (user=nobody, verb=get, resource=nodes, subresource(s)=[proxy])\n".into()
        ),
        "authenticated, but the SubjectAccessReview says no"
    );
    assert_eq!(
        ask(admin.clone(), logs.clone()).await,
        (200, "secret\n".into())
    );
    assert_eq!(
        ask(
            admin.clone(),
            format!("{logs}?timestamps=true&limitBytes=30")
        )
        .await
        .1
        .len(),
        30
    );
    assert_eq!(
        ask(admin.clone(), url("no-such-pod/convert")).await,
        (404, "pod \"no-such-pod\" does not exist".into())
    );
    assert_eq!(
        ask(admin.clone(), url(&format!("{pod}/other"))).await,
        (
            404,
            format!("container \"other\" not found in pod \"{pod}\"")
        )
    );
    assert_eq!(
        ask(admin.clone(), format!("{logs}?tailLines=-1")).await,
        (422, r#"{"message": "Invalid request."}"#.into())
    );
    let post = admin.post(&logs).send().await.unwrap();
    assert_eq!(post.status().as_u16(), 405);
    remove_node(&mut w, &node).await;
    let _ = std::fs::remove_file(&bundle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_follows_its_sims_port_and_any_sim_on_the_node_answers() {
    let node = node_name("share");
    let every = ["--node-status-update-frequency", "1s"];
    let mut w = World::new("sim-logs-node", &["--node-name", &node, every[0], every[1]]).await;
    let jobs: Api<Job> = w.ns.api();
    let pods: Api<Pod> = w.ns.api();
    jobs.create(
        &PostParams::default(),
        &job("said", "echo hello; echo world"),
    )
    .await
    .unwrap();
    wait_for(&jobs, "said", "job Complete", complete).await;
    let pod = name(&pod_of(&w, "said", "pod Succeeded", |p| phase(p) == "Succeeded").await);
    let read = || {
        let (pods, pod) = (pods.clone(), pod.clone());
        async move { pods.logs(&pod, &LogParams::default()).await.ok() }
    };
    let first = node_port(&w, &node, "node registered", |p| p > 0).await;
    assert_eq!(read().await.as_deref(), Some("hello\nworld\n"));

    // A second sim on the node (acting in a namespace of its own) takes the Node at start and
    // answers for the first one's pod: the pod names its log.
    let other_ns = format!("{}-other", w.ns.name);
    let mut second = w.spawn_other_sim(
        "second",
        &other_ns,
        &["--node-name", &node, every[0], every[1]],
    );
    let taken = node_port(&w, &node, "the second sim's port", |p| p != first).await;
    assert_eq!(read().await.as_deref(), Some("hello\nworld\n"));

    // Gone without a word: the first takes the Node back once the port there is dead.
    second.kill();
    let back = node_port(&w, &node, "the first sim's port again", |p| p != taken).await;
    assert_eq!(back, first);
    let again = eventually("logs through the first sim", WAIT, &read)
        .await
        .unwrap();
    assert_eq!(again, "hello\nworld\n");

    // A restarted sim has a new port, and the Node says so.
    w.restart_sim(1);
    node_port(&w, &node, "the restarted sim's port", |p| p != first).await;
    let again = eventually("logs after the restart", WAIT, read)
        .await
        .unwrap();
    assert_eq!(again, "hello\nworld\n");
    remove_node(&mut w, &node).await;
}
