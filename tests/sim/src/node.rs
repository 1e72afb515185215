//! The Node object of the sim's node, registered as a kubelet registers its own
//! (`registerWithAPIServer` and `initialNode` in `pkg/kubelet/kubelet_node_status.go`): created
//! with its status (Node create keeps status, `pkg/registry/core/node/strategy.go`), then its
//! status updated through `nodes/status`. The apiserver reads two things of it for `pods/log`:
//! an address (`--kubelet-preferred-address-types`; the lab prefers `InternalIP`) and
//! `status.daemonEndpoints.kubeletEndpoint.Port`.
//!
//! Several sims may share one node name (the tests run one sim per namespace, all on
//! `sim-node`), and any of them can answer for every pod on the node (see `kubelet`). Each takes
//! the Node's port when it starts (a restarted sim has a new port), and every
//! `--node-status-update-frequency` takes it again if the port there no longer answers (its sim
//! is gone). A Node this sim did not register — no `sim.ferry.example/kubelet` annotation, so a
//! real kubelet's — is left alone.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tracing::{debug, info, warn};

use crate::context::Sim;
use crate::{Result, clock, scheduling};

/// The annotation that says a sim registered the Node.
pub const MARK: &str = "sim.ferry.example/kubelet";

/// The Node's status: its addresses (the kubelet's `InternalIP` and `Hostname`, its node name),
/// the kubelet endpoint's port, `Ready`, and what the node runs. Pure.
pub fn status(name: &str, port: u16, now: &Time) -> NodeStatus {
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "127.0.0.1".into(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: name.into(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(port),
            }),
        }),
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            message: Some("kubelet is posting ready status".into()),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: Some(now.clone()),
        }]),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            operating_system: "linux".into(),
            container_runtime_version: format!("ferry-sim://{}", env!("CARGO_PKG_VERSION")),
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    }
}

/// The Node as the sim creates it: the labels the scheduler sees (`scheduling::node_labels`),
/// the mark, its status. Pure.
pub fn node(name: &str, port: u16, now: &Time) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(scheduling::node_labels(name)),
            annotations: Some([(MARK.to_owned(), "ferry-sim".to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(status(name, port, now)),
    }
}

/// The kubelet port a Node names, if any.
pub fn kubelet_port(node: &Node) -> Option<u16> {
    let port = node
        .status
        .as_ref()?
        .daemon_endpoints
        .as_ref()?
        .kubelet_endpoint
        .as_ref()?
        .port;
    u16::try_from(port).ok().filter(|p| *p != 0)
}

/// What to do about the Node. Pure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    Create,
    /// Point it at this sim's port.
    TakeOver,
    /// It names this sim's port, or a live one (`take_over` false and `alive`).
    Keep,
    /// A real kubelet's.
    Foreign,
}

/// Decides for `existing` given this sim's `port`, whether it must take the Node anyway (at
/// start), and whether the port the Node names still answers. Pure.
pub fn plan(existing: Option<&Node>, port: u16, take_over: bool, alive: bool) -> Plan {
    let Some(n) = existing else {
        return Plan::Create;
    };
    if !n.annotations().contains_key(MARK) {
        return Plan::Foreign;
    }
    match kubelet_port(n) {
        Some(p) if p == port => Plan::Keep,
        Some(_) if !take_over && alive => Plan::Keep,
        _ => Plan::TakeOver,
    }
}

async fn answers(port: u16) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(("127.0.0.1", port))
        )
        .await,
        Ok(Ok(_))
    )
}

/// One look at the Node; acts on its [`plan`].
///
/// Errors: the apiserver's.
pub async fn sync(sim: &Sim, port: u16, take_over: bool) -> Result<Plan> {
    let name = sim.settings.node_name.as_str();
    let api: Api<Node> = Api::all(sim.client.clone());
    let existing = api.get_opt(name).await?;
    let alive = match existing.as_ref().and_then(kubelet_port) {
        Some(p) if p != port && !take_over => answers(p).await,
        _ => false,
    };
    let plan = plan(existing.as_ref(), port, take_over, alive);
    let now = Time(clock::now());
    match plan {
        Plan::Create => match api
            .create(&PostParams::default(), &node(name, port, &now))
            .await
        {
            Ok(_) => info!(node = name, port, "node registered"),
            // Another sim on the node was quicker; it answers for every pod as well.
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(Plan::Keep),
            Err(e) => return Err(e.into()),
        },
        Plan::TakeOver => {
            let patch = serde_json::json!({"status": status(name, port, &now)});
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            info!(node = name, port, "node's kubelet endpoint is this sim's");
        }
        Plan::Keep => debug!(node = name, "node kept"),
        Plan::Foreign => {}
    }
    Ok(plan)
}

/// Registers the Node, then looks at it every `every` until the sim ends. Errors are logged and
/// the next look tries again (a sim without the right to write Nodes runs on, without logs).
/// With `heartbeat` (KubeVirt's own virt-controller runs) each look also sends virt-handler's
/// heartbeat (`handler::heartbeat`), more often than its 1 min (`heartBeatInterval` in
/// `pkg/virt-handler/vm.go`).
pub async fn run(sim: Arc<Sim>, port: u16, every: Duration, heartbeat: bool) {
    let mut first = true;
    let mut warned = false;
    loop {
        let looked = sync(&sim, port, first).await;
        if heartbeat && matches!(looked, Ok(Plan::Create | Plan::TakeOver | Plan::Keep)) {
            let api: Api<Node> = Api::all(sim.client.clone());
            let patch = crate::handler::heartbeat(clock::now());
            if let Err(e) = api
                .patch(
                    &sim.settings.node_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                warn!(node = %sim.settings.node_name, error = %e, "virt-handler heartbeat");
            }
        }
        match looked {
            Ok(Plan::Foreign) if !warned => {
                warn!(
                    node = %sim.settings.node_name,
                    "the Node exists without {MARK}: a real kubelet's; left alone (pods/log will not reach this sim)"
                );
                warned = true;
            }
            Ok(_) => first = false,
            Err(e) => warn!(node = %sim.settings.node_name, error = %e, "node registration"),
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn now() -> Time {
        Time("2026-01-01T00:00:00Z".parse().unwrap())
    }

    #[test]
    fn the_node_names_the_endpoint_the_apiserver_dials() {
        let n = node("sim-node", 10250, &now());
        assert_eq!(kubelet_port(&n), Some(10250));
        let st = n.status.clone().unwrap();
        let addrs = st.addresses.unwrap();
        assert_eq!(
            (addrs[0].type_.as_str(), addrs[0].address.as_str()),
            ("InternalIP", "127.0.0.1")
        );
        assert_eq!(addrs[1].address, "sim-node");
        assert_eq!(st.conditions.unwrap()[0].status, "True");
        assert_eq!(n.labels()["kubernetes.io/hostname"], "sim-node");
        assert!(n.annotations().contains_key(MARK));
    }

    #[test]
    fn a_sim_takes_the_node_at_start_or_from_a_dead_port_never_from_a_kubelet() {
        let ours = node("n", 1000, &now());
        assert_eq!(plan(None, 2000, false, false), Plan::Create);
        assert_eq!(plan(Some(&ours), 1000, true, false), Plan::Keep);
        assert_eq!(plan(Some(&ours), 2000, true, true), Plan::TakeOver);
        assert_eq!(plan(Some(&ours), 2000, false, true), Plan::Keep);
        assert_eq!(plan(Some(&ours), 2000, false, false), Plan::TakeOver);
        let mut real = ours.clone();
        real.metadata.annotations = None;
        assert_eq!(plan(Some(&real), 2000, true, false), Plan::Foreign);
    }
}
