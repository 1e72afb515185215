//! The kubelet's HTTPS endpoint, for `pods/log`: the apiserver answers
//! `GET /api/v1/namespaces/NS/pods/NAME/log` by proxying to
//! `https://<node address>:<daemonEndpoints.kubeletEndpoint.Port>/containerLogs/NS/NAME/CONTAINER`
//! (`LogLocation` in `pkg/registry/core/pod/strategy.go`, the node's address and port from
//! `NodeConnectionInfoGetter` in `pkg/kubelet/client/kubelet_client.go`), and relays the answer:
//! a 2xx as the log, anything else as a Status with the kubelet's code and text.
//!
//! What the kubelet does, and so the sim (`pkg/kubelet/server/server.go`):
//! * TLS with a self-signed serving certificate, made at start as a kubelet without
//!   `serverTLSBootstrap` or `--tls-cert-file` does (`--tls-cert-file`/`--tls-private-key-file`
//!   name another).
//! * Authentication by client certificate (`InstallAuthFilter`; `--client-ca-file`, the
//!   cluster's CA by default): one is requested, not required, in the handshake, and checked
//!   after it, as Go's `RequestClientCert` with the x509 authenticator does — none, or one the CA
//!   did not sign, is `401 Unauthorized`; its CN is the user, its O the groups.
//! * Authorization by SubjectAccessReview (the `Webhook` mode): `get` (the HTTP verb) on
//!   `nodes/proxy` of this node (`GetRequestAttributes`); a denial is `403 Forbidden (user=…)`.
//!   Decisions are cached 5 min (allowed) and 30 s (denied), the kubelet's webhook defaults.
//! * `getContainerLogs`: the pod must be on this node (`404 pod "x" does not exist`) and have the
//!   container (`404 container "c" not found in pod "x"`); the container's status decides
//!   whether there is a log (`validateContainerLogStatus` in `pkg/kubelet/kubelet_pods.go`, 400
//!   with its sentences); then the log, read as `ReadLogs` does (see `logs`), and with
//!   `follow=true` streamed until the container is no longer running and its log is read to the
//!   end (cri-client checks the container's state every second, `logForceCheckPeriod`).
//!
//! The pod, its container's state and its log's path come from the apiserver (the pod's status,
//! written by whichever sim runs it, and `pods::container_log`), so every sim on the host answers
//! for every pod on its node.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::context::Sim;
use crate::logs::{self, Cursor, Options, Render, Stream};
use crate::pods;
use crate::{Error, Result};

/// What the command line says about the endpoint (kept beside the other settings, in
/// `context.rs`).
pub use crate::context::KubeletConfig as Config;

/// The bound endpoint, before it serves.
pub struct Endpoint {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    authn: Option<Arc<dyn ClientCertVerifier>>,
    pub port: u16,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

/// The self-signed serving certificate a kubelet makes for itself (`GenerateSelfSignedCertKey`
/// in `k8s.io/client-go/util/cert`: CN `<host>@<unix time>`, the host and its addresses as
/// names).
///
/// Errors: rcgen's.
pub fn self_signed(node: &str) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>)> {
    let bad = |e: rcgen::Error| Error::Invalid(format!("kubelet serving certificate: {e}"));
    let mut params = rcgen::CertificateParams::new(vec![
        node.to_owned(),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
    ])
    .map_err(bad)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("{node}@{}", Timestamp::now().as_second()),
    );
    let key = rcgen::KeyPair::generate().map_err(bad)?;
    let cert = params.self_signed(&key).map_err(bad)?;
    Ok((
        cert.der().clone(),
        PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    ))
}

fn load_pem(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let bad = |p: &Path, e: rustls::pki_types::pem::Error| {
        Error::Invalid(format!("{}: {e}", p.display()))
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| bad(cert, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(cert, e))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, e))?;
    Ok((chain, key))
}

/// Asks a client for a certificate without requiring one and without judging it during the
/// handshake (Go's `tls.RequestClientCert`, what the kubelet's server uses): the handshake only
/// proves the client holds the certificate's key; [`authenticate`] judges the certificate after
/// it, so a missing or foreign one gets the kubelet's `401`, not a failed handshake.
#[derive(Debug)]
struct RequestClientCert {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Binds the endpoint on 127.0.0.1 (the Node's InternalIP) with its TLS set up.
///
/// Errors: the port is taken, the certificate files cannot be read, TLS cannot be set up.
pub async fn bind(cfg: &Config, node: &str) -> Result<Endpoint> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let bad = |e: rustls::Error| Error::Invalid(format!("kubelet TLS: {e}"));
    let (chain, key) = match &cfg.serving {
        Some((cert, key)) => load_pem(cert, key)?,
        None => {
            let (cert, key) = self_signed(node)?;
            (vec![cert], key)
        }
    };
    let mut roots = RootCertStore::empty();
    for ca in &cfg.client_ca {
        roots
            .add(ca.clone())
            .map_err(|e| Error::Invalid(format!("client CA: {e}")))?;
    }
    let authn = if roots.is_empty() {
        None
    } else {
        Some(
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| Error::Invalid(format!("client CA: {e}")))?,
        )
    };
    let verifier: Arc<dyn ClientCertVerifier> = match &authn {
        Some(inner) => Arc::new(RequestClientCert {
            inner: inner.clone(),
        }),
        None => WebPkiClientVerifier::no_client_auth(),
    };
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(bad)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(bad)?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let listener = TcpListener::bind(("127.0.0.1", cfg.port))
        .await
        .map_err(|e| Error::io(format!("127.0.0.1:{}", cfg.port), e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("kubelet listener", e))?
        .port();
    Ok(Endpoint {
        listener,
        acceptor: TlsAcceptor::from(Arc::new(tls)),
        authn,
        port,
    })
}

/// Who a request comes from (`user.Info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

/// One DER element: tag, contents, what follows. `None` on anything malformed.
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject's common name and organizations of a DER certificate (RFC 5280 §4.1.2.6), what
/// the x509 authenticator makes the user and groups (`CommonNameUserConversion` in
/// `k8s.io/apiserver/pkg/authentication/request/x509`). Pure.
pub fn subject(cert: &[u8]) -> Option<(String, Vec<String>)> {
    let (0x30, certificate, _) = der(cert)? else {
        return None;
    };
    let (0x30, mut tbs, _) = der(certificate)? else {
        return None;
    };
    // [0] version (optional), serialNumber, signature, issuer, validity, subject.
    if tbs.first() == Some(&0xa0) {
        tbs = der(tbs)?.2;
    }
    for _ in 0..4 {
        tbs = der(tbs)?.2;
    }
    let (0x30, mut rdns, _) = der(tbs)? else {
        return None;
    };
    let (mut cn, mut orgs) = (String::new(), Vec::new());
    while !rdns.is_empty() {
        let (_, set, rest) = der(rdns)?;
        rdns = rest;
        let mut atvs = set;
        while !atvs.is_empty() {
            let (_, atv, rest) = der(atvs)?;
            atvs = rest;
            let (0x06, oid, value) = der(atv)? else {
                continue;
            };
            let value = String::from_utf8_lossy(der(value)?.1).into_owned();
            match oid {
                [0x55, 0x04, 0x03] => cn = value,
                [0x55, 0x04, 0x0a] => orgs.push(value),
                _ => {}
            }
        }
    }
    Some((cn, orgs))
}

/// The user of a connection: its client certificate checked against the client CA, its CN the
/// name (none: unauthenticated, as upstream), its O and `system:authenticated` the groups.
fn authenticate(
    verifier: Option<&Arc<dyn ClientCertVerifier>>,
    certs: Option<&[CertificateDer<'_>]>,
) -> Option<User> {
    let verifier = verifier?;
    let (ee, intermediates) = certs?.split_first()?;
    verifier
        .verify_client_cert(ee, intermediates, UnixTime::now())
        .ok()?;
    let (name, mut groups) = subject(ee)?;
    if name.is_empty() {
        return None;
    }
    groups.push("system:authenticated".into());
    Some(User { name, groups })
}

/// The kubelet's `Webhook` authorizer: SubjectAccessReviews, their answers cached.
struct Authorizer {
    sim: Arc<Sim>,
    cache: Mutex<HashMap<String, (bool, Instant)>>,
}

/// How long an answer is kept (`authorization.webhook.cacheAuthorizedTTL` and
/// `cacheUnauthorizedTTL`, the kubelet's defaults).
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);

impl Authorizer {
    /// Whether `user` may `verb` `nodes/proxy` of this node (what `GetRequestAttributes` asks for
    /// `/containerLogs`).
    async fn allowed(&self, user: &User, verb: &str) -> Result<bool> {
        let key = format!("{verb}\n{}\n{}", user.name, user.groups.join("\n"));
        let now = Instant::now();
        if let Ok(cache) = self.cache.lock()
            && let Some((allowed, until)) = cache.get(&key)
            && *until > now
        {
            return Ok(*allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_owned()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some("proxy".into()),
                    name: Some(self.sim.settings.node_name.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.sim.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
        if let Ok(mut cache) = self.cache.lock() {
            cache.retain(|_, (_, until)| *until > now);
            cache.insert(key, (allowed, now + ttl));
        }
        Ok(allowed)
    }
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn text(code: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.into())).boxed_unsync());
    *r.status_mut() = code;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The API verb of an HTTP method, as `GetRequestAttributes` maps it.
fn verb(m: &Method) -> &'static str {
    match *m {
        Method::POST => "create",
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
}

impl Endpoint {
    /// Serves until dropped (the sim's end).
    pub async fn serve(self, sim: Arc<Sim>) {
        let authz = Arc::new(Authorizer {
            sim: sim.clone(),
            cache: Mutex::new(HashMap::new()),
        });
        info!(port = self.port, node = %sim.settings.node_name, "kubelet endpoint serving");
        loop {
            let (tcp, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "kubelet endpoint: accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (acceptor, authn) = (self.acceptor.clone(), self.authn.clone());
            let (sim, authz) = (sim.clone(), authz.clone());
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp))
                    .await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        debug!(%peer, error = %e, "kubelet endpoint: TLS handshake");
                        return;
                    }
                    Err(_) => return,
                };
                let user = authenticate(authn.as_ref(), tls.get_ref().1.peer_certificates());
                let service = hyper::service::service_fn(move |req| {
                    let (sim, authz, user) = (sim.clone(), authz.clone(), user.clone());
                    async move { Ok::<_, Infallible>(handle(&sim, &authz, user, req).await) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await
                {
                    debug!(%peer, error = %e, "kubelet endpoint: connection");
                }
            });
        }
    }
}

async fn handle(
    sim: &Arc<Sim>,
    authz: &Authorizer,
    user: Option<User>,
    req: Request<Incoming>,
) -> Response<Body> {
    // InstallAuthFilter: every path, before routing.
    let Some(user) = user else {
        return text(StatusCode::UNAUTHORIZED, "Unauthorized");
    };
    let verb = verb(req.method());
    match authz.allowed(&user, verb).await {
        Ok(true) => {}
        Ok(false) => {
            return text(
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden (user={}, verb={verb}, resource=nodes, subresource(s)=[proxy])\n",
                    user.name
                ),
            );
        }
        Err(e) => {
            warn!(error = %e, user = %user.name, "kubelet endpoint: SubjectAccessReview");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "Authorization error (user={}, verb={verb}, resource=nodes, subresource=proxy)",
                    user.name
                ),
            );
        }
    }
    let Some(rest) = req.uri().path().strip_prefix("/containerLogs/") else {
        return text(StatusCode::NOT_FOUND, "404 page not found");
    };
    if req.method() != Method::GET {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        r.headers_mut()
            .insert(http::header::ALLOW, http::HeaderValue::from_static("GET"));
        return r;
    }
    let parts: Vec<&str> = rest.split('/').collect();
    let [ns, pod, container] = parts[..] else {
        return text(StatusCode::NOT_FOUND, "404 page not found");
    };
    for (value, what) in [
        (pod, "podID"),
        (container, "container name"),
        (ns, "podNamespace"),
    ] {
        if value.is_empty() {
            return text(
                StatusCode::BAD_REQUEST,
                format!(r#"{{"message": "Missing {what}."}}"#),
            );
        }
    }
    let query = match parse_query(req.uri().query().unwrap_or(""), Timestamp::now()) {
        Ok(q) => q,
        Err((code, msg)) => return text(code, msg),
    };
    match container_logs(sim, ns, pod, container, query).await {
        Ok(r) | Err(r) => r,
    }
}

/// The request's `PodLogOptions` plus `previous`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    pub opts: Options,
    pub previous: bool,
}

/// Reads the query as the kubelet decodes and validates `PodLogOptions` (the legacy `tail`
/// included; `sinceTime` wins over `sinceSeconds` when later, as `NewLogOptions` does).
/// Errors: `400 Unable to decode query` or `422 Invalid request`, upstream's texts. Pure.
pub fn parse_query(
    query: &str,
    now: Timestamp,
) -> std::result::Result<Query, (StatusCode, String)> {
    let undecodable = || {
        (
            StatusCode::BAD_REQUEST,
            r#"{"message": "Unable to decode query."}"#.to_owned(),
        )
    };
    let invalid = || {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"message": "Invalid request."}"#.to_owned(),
        )
    };
    let boolean = |v: &str| match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Some(false),
        _ => None,
    };
    let mut q = Query::default();
    let (mut tail, mut since_seconds, mut since_time, mut limit) = (None, None, None, None);
    let mut legacy_tail = None;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "follow" => q.opts.follow = boolean(&v).ok_or_else(undecodable)?,
            "timestamps" => q.opts.timestamps = boolean(&v).ok_or_else(undecodable)?,
            "previous" => q.previous = boolean(&v).ok_or_else(undecodable)?,
            "tailLines" => tail = Some(v.parse::<i64>().map_err(|_| undecodable())?),
            "tail" => legacy_tail = Some(v.into_owned()),
            "limitBytes" => limit = Some(v.parse::<i64>().map_err(|_| undecodable())?),
            "sinceSeconds" => since_seconds = Some(v.parse::<i64>().map_err(|_| undecodable())?),
            "sinceTime" => {
                since_time = Some(v.parse::<Timestamp>().map_err(|_| undecodable())?);
            }
            "stream" => {
                q.opts.stream = match v.as_ref() {
                    "All" => None,
                    "Stdout" => Some(Stream::Stdout),
                    "Stderr" => Some(Stream::Stderr),
                    other => {
                        return Err((
                            StatusCode::BAD_REQUEST,
                            format!("invalid stream type {other:?}"),
                        ));
                    }
                };
            }
            _ => {}
        }
    }
    // "backwards compatibility for the "tail" query parameter": `all` is no tail at all.
    if let Some(t) = legacy_tail {
        tail = match t.as_str() {
            "all" => None,
            n => Some(n.parse::<i64>().map_err(|_| undecodable())?),
        };
    }
    // ValidatePodLogOptions.
    if tail.is_some_and(|t| t < 0)
        || limit.is_some_and(|l| l < 1)
        || since_seconds.is_some_and(|s| s < 1)
        || (since_seconds.is_some() && since_time.is_some())
    {
        return Err(invalid());
    }
    q.opts.tail = tail.and_then(|t| usize::try_from(t).ok());
    q.opts.limit_bytes = limit.and_then(|l| u64::try_from(l).ok());
    q.opts.since = since_seconds
        .map(|s| now - k8s_openapi::jiff::SignedDuration::from_secs(s))
        .or(since_time);
    Ok(q)
}

fn has_container(pod: &Pod, name: &str) -> bool {
    let Some(spec) = &pod.spec else { return false };
    spec.containers.iter().any(|c| c.name == name)
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
}

fn status_of<'a>(pod: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    let st = pod.status.as_ref()?;
    [
        &st.container_statuses,
        &st.init_container_statuses,
        &st.ephemeral_container_statuses,
    ]
    .into_iter()
    .flatten()
    .flatten()
    .find(|c| c.name == name)
}

/// Whether the container has a log to read, and whether it still runs; else the kubelet's 400
/// text (`validateContainerLogStatus` in `pkg/kubelet/kubelet_pods.go`). Pure.
pub fn log_state(pod: &Pod, container: &str, previous: bool) -> std::result::Result<bool, String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let Some(cs) = status_of(pod, container) else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let state = cs.state.clone().unwrap_or_default();
    let last = cs.last_state.clone().unwrap_or_default();
    let terminated_id = |t: &Option<k8s_openapi::api::core::v1::ContainerStateTerminated>| {
        t.as_ref()
            .and_then(|t| t.container_id.clone())
            .filter(|id| !id.is_empty())
    };
    if previous {
        return match terminated_id(&last.terminated) {
            Some(_) => Ok(false),
            None => Err(format!(
                "previous terminated container {container:?} in pod {pod_name:?} not found"
            )),
        };
    }
    if state.running.is_some() {
        return Ok(true);
    }
    if state.terminated.is_some() {
        return match terminated_id(&state.terminated).or_else(|| terminated_id(&last.terminated)) {
            Some(_) => Ok(false),
            None => Err(format!(
                "container {container:?} in pod {pod_name:?} is terminated"
            )),
        };
    }
    if last.terminated.is_some() {
        return match terminated_id(&last.terminated) {
            Some(_) => Ok(false),
            None => Err(format!(
                "container {container:?} in pod {pod_name:?} is terminated"
            )),
        };
    }
    if let Some(w) = &state.waiting {
        let why = match w.reason.as_deref().unwrap_or_default() {
            "ErrImagePull" => "image can't be pulled".to_owned(),
            "ImagePullBackOff" => "trying and failing to pull image".to_owned(),
            reason => reason.to_owned(),
        };
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: {why}"
        ));
    }
    Err(format!(
        "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
    ))
}

/// The pod, when it is on this node.
async fn pod_here(
    sim: &Sim,
    ns: &str,
    name: &str,
) -> std::result::Result<Option<Pod>, kube::Error> {
    let pod = sim.api::<Pod>(ns).get_opt(name).await?;
    Ok(pod.filter(|p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_deref())
            == Some(sim.settings.node_name.as_str())
    }))
}

/// How often a follower looks for new output, and at the container's state (cri-client's
/// `logForceCheckPeriod`).
const FOLLOW_POLL: Duration = Duration::from_millis(100);
const STATE_CHECK: Duration = Duration::from_secs(1);

/// The log of the pod's container and whether the container runs, once the kubelet's checks
/// passed: the pod is on this node, has the container, and its container's state has a log.
async fn log_of(
    sim: &Arc<Sim>,
    ns: &str,
    name: &str,
    container: &str,
    previous: bool,
) -> std::result::Result<(PathBuf, bool), Response<Body>> {
    let pod = match pod_here(sim, ns, name).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return Err(text(
                StatusCode::NOT_FOUND,
                format!("pod {name:?} does not exist"),
            ));
        }
        Err(e) => return Err(text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    };
    if !has_container(&pod, container) {
        return Err(text(
            StatusCode::NOT_FOUND,
            format!("container {container:?} not found in pod {name:?}"),
        ));
    }
    let running =
        log_state(&pod, container, previous).map_err(|m| text(StatusCode::BAD_REQUEST, m))?;
    let own = &sim.settings.volumes;
    let Some(path) =
        pods::console_log(&pod, container, own).or_else(|| pods::container_log(&pod, own))
    else {
        return Err(text(
            StatusCode::BAD_REQUEST,
            format!("container {container:?} in pod {name:?} is not available"),
        ));
    };
    Ok((path, running))
}

/// `getContainerLogs`: the container's log as `ReadLogs` reads it, followed while the container
/// runs when asked to.
async fn container_logs(
    sim: &Arc<Sim>,
    ns: &str,
    name: &str,
    container: &str,
    query: Query,
) -> std::result::Result<Response<Body>, Response<Body>> {
    let (path, running) = log_of(sim, ns, name, container, query.previous).await?;
    let mut cursor = Cursor::default();
    let first = logs::read_new(&path, &mut cursor, !running).map_err(|e| {
        let p = path.display();
        text(
            StatusCode::BAD_REQUEST,
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("failed to try resolving symlinks in path {p:?}: lstat {p}: no such file or directory")
            } else {
                format!("failed to open log file {p:?}: {e}")
            },
        )
    })?;
    let opts = query.opts;
    let mut render = Render::new(&opts);
    let head = render.render(&logs::tail(first, opts.tail), &opts);
    let ok = |body: Body| {
        let mut r = Response::new(body);
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    };
    if !opts.follow || !running || render.done() {
        return Ok(ok(Full::new(Bytes::from(head)).boxed_unsync()));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let (sim, ns, name, container) = (
        sim.clone(),
        ns.to_owned(),
        name.to_owned(),
        container.to_owned(),
    );
    tokio::spawn(async move {
        if !head.is_empty() && tx.send(Bytes::from(head)).await.is_err() {
            return;
        }
        let mut checked = Instant::now();
        let mut ended = false;
        while !render.done() && !ended && !tx.is_closed() {
            tokio::time::sleep(FOLLOW_POLL).await;
            if checked.elapsed() >= STATE_CHECK {
                checked = Instant::now();
                // Gone, or no longer running: read what is left, then end.
                ended = match pod_here(&sim, &ns, &name).await {
                    Ok(Some(p)) => !matches!(log_state(&p, &container, false), Ok(true)),
                    Ok(None) => true,
                    Err(_) => false,
                };
            }
            let Ok(new) = logs::read_new(&path, &mut cursor, ended) else {
                break;
            };
            let out = render.render(&new, &opts);
            if !out.is_empty() && tx.send(Bytes::from(out)).await.is_err() {
                break;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Ok(ok(StreamBody::new(stream).boxed_unsync()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting, PodSpec, PodStatus,
    };

    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_query_is_read_and_checked_as_the_kubelet_does() {
        let now = t("2026-01-01T00:01:00Z");
        let q = parse_query(
            "follow=true&tailLines=3&limitBytes=100&timestamps=1&sinceSeconds=30&stream=Stderr",
            now,
        )
        .unwrap();
        assert!(q.opts.follow && q.opts.timestamps && !q.previous);
        assert_eq!(q.opts.tail, Some(3));
        assert_eq!(q.opts.limit_bytes, Some(100));
        assert_eq!(q.opts.since, Some(t("2026-01-01T00:00:30Z")));
        assert_eq!(q.opts.stream, Some(Stream::Stderr));
        let q = parse_query("sinceTime=2026-01-01T00%3A00%3A10Z&tail=all", now).unwrap();
        assert_eq!(
            (q.opts.since, q.opts.tail),
            (Some(t("2026-01-01T00:00:10Z")), None)
        );
        assert_eq!(parse_query("tail=2", now).unwrap().opts.tail, Some(2));
        assert_eq!(parse_query("", now).unwrap(), Query::default());
        for bad in ["tailLines=x", "follow=maybe", "sinceTime=yesterday"] {
            assert_eq!(
                parse_query(bad, now).unwrap_err().0,
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
        for invalid in [
            "tailLines=-1",
            "limitBytes=0",
            "sinceSeconds=0",
            "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z",
        ] {
            assert_eq!(
                parse_query(invalid, now).unwrap_err().0,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{invalid}"
            );
        }
        assert_eq!(
            parse_query("stream=Both", now).unwrap_err().1,
            "invalid stream type \"Both\""
        );
    }

    fn pod(state: ContainerState) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("p".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "c".into(),
                    state: Some(state),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn the_containers_state_decides_as_upstream() {
        let waiting = pod(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("ContainerCreating".into()),
                message: None,
            }),
            ..ContainerState::default()
        });
        assert_eq!(
            log_state(&waiting, "c", false).unwrap_err(),
            r#"container "c" in pod "p" is waiting to start: ContainerCreating"#
        );
        let running = pod(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..ContainerState::default()
        });
        assert_eq!(log_state(&running, "c", false), Ok(true));
        assert_eq!(
            log_state(&running, "c", true).unwrap_err(),
            r#"previous terminated container "c" in pod "p" not found"#
        );
        let ended = |id: Option<&str>| {
            pod(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    container_id: id.map(str::to_owned),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            })
        };
        assert_eq!(
            log_state(&ended(Some("ferry-sim://1")), "c", false),
            Ok(false)
        );
        assert_eq!(
            log_state(&ended(None), "c", false).unwrap_err(),
            r#"container "c" in pod "p" is terminated"#
        );
        let mut fresh = pod(ContainerState::default());
        fresh.status = None;
        assert_eq!(
            log_state(&fresh, "c", false).unwrap_err(),
            r#"container "c" in pod "p" is not available"#
        );
        assert_eq!(
            log_state(&pod(ContainerState::default()), "c", false).unwrap_err(),
            r#"container "c" in pod "p" is waiting to start - no logs yet"#
        );
        assert!(has_container(&running, "c") && !has_container(&running, "d"));
    }

    #[test]
    fn the_subject_names_the_user_and_groups() {
        let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:masters");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject(cert.der()),
            Some((
                "kube-apiserver-kubelet-client".to_owned(),
                vec!["system:masters".to_owned()]
            ))
        );
        assert_eq!(subject(b"\x30\x03junk"), None);
        let (served, _) = self_signed("sim-node").unwrap();
        assert!(subject(&served).unwrap().0.starts_with("sim-node@"));
    }

    #[test]
    fn only_a_certificate_of_the_client_ca_authenticates() {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(vec![]).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let mut leaf = rcgen::CertificateParams::new(vec![]).unwrap();
        leaf.distinguished_name = rcgen::DistinguishedName::new();
        leaf.distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let signed = leaf.signed_by(&leaf_key, &ca).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        let user = authenticate(Some(&verifier), Some(&[signed.der().clone()])).unwrap();
        assert_eq!(user.name, "alice");
        assert_eq!(user.groups, vec!["system:authenticated".to_owned()]);
        let (stranger, _) = self_signed("elsewhere").unwrap();
        assert_eq!(authenticate(Some(&verifier), Some(&[stranger])), None);
        assert_eq!(authenticate(Some(&verifier), None), None);
        assert_eq!(authenticate(None, Some(&[signed.der().clone()])), None);
    }
}
