//! The health gate of Validating: once the guest passed its readiness check, the guest's own
//! service is probed (`spec.target.healthCheck`) from the controller at the instance's pod
//! network address, every period, until enough probes in a row answered or the timeout ran out.
//! A pure decision ([`decide`]) on what the status recorded and the probe just made; the probe
//! itself ([`probe`]) is the only I/O.
//!
//! Why the address is the VMI's: KubeVirt reports the pod network's interface first in
//! `status.interfaces`, with the pod's address for a masquerade binding (`NetStat.UpdateStatus`,
//! `pkg/network/setup/netstat.go`), and masquerade forwards every port to the guest when the
//! interface lists none (`pkg/network/setup/masquerade` in KubeVirt; ferry lists none). A
//! guest on a bridge binding has the pod's address itself.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ferry_crds::{HealthCheck, HealthCheckStatus, Readiness, VirtualMachineMigration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::apis::kubevirt::VirtualMachineInstance;

/// How long one probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// It answered.
    pub ok: bool,
    /// What it found, for the status and the failure's message.
    pub said: String,
}

/// The health check that applies to `vmm`: one is set and ferry starts the VM and waits for
/// its guest (readiness not None; a target left powered off gets no check). Pure.
pub fn applies(vmm: &VirtualMachineMigration) -> Option<&HealthCheck> {
    let hc = vmm.spec.target.template.health_check.as_ref()?;
    (vmm.readiness() != Readiness::None).then_some(hc)
}

/// Whether a failed health check rolls the migration back (`onHealthCheckFailure`, RollBack
/// when unset). Pure.
pub fn rolls_back(vmm: &VirtualMachineMigration) -> bool {
    vmm.spec
        .target
        .template
        .on_health_check_failure
        .unwrap_or_default()
        == ferry_crds::OnHealthCheckFailure::RollBack
}

/// What the status recorded of the check.
fn recorded(vmm: &VirtualMachineMigration) -> Option<&HealthCheckStatus> {
    vmm.status.as_ref()?.health_check.as_ref()
}

/// Whether the check no longer holds the migration: none applies, or it passed. Pure.
pub fn clear(vmm: &VirtualMachineMigration) -> bool {
    applies(vmm).is_none() || recorded(vmm).is_some_and(|h| h.passed)
}

/// Whether a probe is due at `now`: the check holds the migration and the last probe is a
/// period old (or none was made). Pure.
pub fn due(vmm: &VirtualMachineMigration, now: Timestamp) -> bool {
    let Some(hc) = applies(vmm) else {
        return false;
    };
    if clear(vmm) {
        return false;
    }
    let last = recorded(vmm).and_then(|h| h.last_probe_at.as_ref());
    last.is_none_or(|t| since(t, now) >= Duration::from_secs(hc.period_seconds.into()))
}

fn since(t: &Time, now: Timestamp) -> Duration {
    now.duration_since(t.0).try_into().unwrap_or_default()
}

/// What the gate says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Enough probes in a row answered: record it, then go on.
    Passed(HealthCheckStatus),
    /// Not yet: record how it goes, look again within `requeue`.
    Probing {
        /// The status to record.
        status: HealthCheckStatus,
        /// When the next probe is due.
        requeue: Duration,
    },
    /// The timeout ran out with the last probe unanswered.
    Failed {
        /// The status to record.
        status: HealthCheckStatus,
        /// How long the probes were made for.
        waited: Duration,
    },
}

/// Decides on the status `before` and the probe made `now` (none when it was not due). Pure.
///
/// # Guarantees
/// * Passes only on `successThreshold` answered probes in a row, the last one just made.
/// * Fails only once `timeoutSeconds` passed since the first probe, and only on a probe that
///   did not answer (a probe that answers past the timeout still counts).
pub fn decide(
    hc: &HealthCheck,
    before: Option<&HealthCheckStatus>,
    probe: Option<&Probe>,
    now: Timestamp,
) -> Gate {
    let mut s = before.cloned().unwrap_or_default();
    let period = Duration::from_secs(hc.period_seconds.into());
    let Some(p) = probe else {
        let requeue = s
            .last_probe_at
            .as_ref()
            .map_or(Duration::ZERO, |t| period.saturating_sub(since(t, now)));
        return Gate::Probing { status: s, requeue };
    };
    let started = s.started_at.get_or_insert(Time(now)).clone();
    s.last_probe_at = Some(Time(now));
    s.probes = s.probes.saturating_add(1);
    s.successes = if p.ok {
        s.successes.saturating_add(1)
    } else {
        0
    };
    s.last_result.clone_from(&p.said);
    if s.successes >= hc.success_threshold {
        s.passed = true;
        return Gate::Passed(s);
    }
    let waited = since(&started, now);
    if !p.ok && waited >= Duration::from_secs(hc.timeout_seconds.into()) {
        return Gate::Failed { status: s, waited };
    }
    Gate::Probing {
        status: s,
        requeue: period,
    }
}

/// The address the check probes: the first of the instance's interfaces that has one.
pub fn address(vmi: &VirtualMachineInstance) -> Option<IpAddr> {
    vmi.status
        .as_ref()?
        .interfaces
        .iter()
        .find_map(|i| i.ip_address.as_deref()?.parse().ok())
}

/// One probe of `hc` against the instance `vmi` (none: not there).
pub async fn probe(hc: &HealthCheck, vmi: Option<&VirtualMachineInstance>) -> Probe {
    let Some(ip) = vmi.and_then(address) else {
        return Probe {
            ok: false,
            said: "the VirtualMachineInstance reports no address yet".into(),
        };
    };
    let at = SocketAddr::new(ip, hc.port());
    match (&hc.tcp, &hc.http) {
        (Some(_), _) => tcp(at).await,
        (None, Some(h)) => http(at, &h.path).await,
        (None, None) => Probe {
            ok: false,
            said: "no probe is set".into(),
        },
    }
}

async fn tcp(at: SocketAddr) -> Probe {
    let said = |what: &str| format!("tcp {at}: {what}");
    match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(at)).await {
        Ok(Ok(_)) => Probe {
            ok: true,
            said: said("connected"),
        },
        Ok(Err(e)) => Probe {
            ok: false,
            said: said(&e.to_string()),
        },
        Err(_) => Probe {
            ok: false,
            said: said(&format!("no answer within {}s", PROBE_TIMEOUT.as_secs())),
        },
    }
}

async fn http(at: SocketAddr, path: &str) -> Probe {
    let url = format!("http://{at}{path}");
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build();
    let answer = match client {
        Ok(c) => c.get(&url).send().await,
        Err(e) => {
            return Probe {
                ok: false,
                said: format!("GET {url}: {e}"),
            };
        }
    };
    match answer {
        Ok(r) => {
            let code = r.status();
            Probe {
                ok: code.is_success() || code.is_redirection(),
                said: format!("GET {url}: {code}"),
            }
        }
        Err(e) => Probe {
            ok: false,
            said: format!("GET {url}: {}", ferry_crds::error_chain(&e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hc(threshold: u32) -> HealthCheck {
        serde_json::from_value(serde_json::json!({
            "tcp": {"port": 8080}, "timeoutSeconds": 60, "periodSeconds": 10,
            "successThreshold": threshold,
        }))
        .unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn p(ok: bool) -> Probe {
        Probe {
            ok,
            said: if ok { "connected" } else { "refused" }.into(),
        }
    }

    /// Runs probes at the given seconds; the gate after each.
    fn run(h: &HealthCheck, probes: &[(i64, bool)]) -> Vec<Gate> {
        let mut s: Option<HealthCheckStatus> = None;
        probes
            .iter()
            .map(|(t, ok)| {
                let g = decide(h, s.as_ref(), Some(&p(*ok)), at(*t));
                s = Some(match &g {
                    Gate::Passed(s)
                    | Gate::Probing { status: s, .. }
                    | Gate::Failed { status: s, .. } => s.clone(),
                });
                g
            })
            .collect()
    }

    #[test]
    fn passes_on_enough_answers_in_a_row_and_a_miss_starts_the_count_again() {
        let g = run(&hc(2), &[(0, true), (10, false), (20, true), (30, true)]);
        assert!(matches!(g[0], Gate::Probing { ref status, .. } if status.successes == 1));
        assert!(matches!(g[1], Gate::Probing { ref status, .. } if status.successes == 0));
        assert!(matches!(g[2], Gate::Probing { .. }));
        let Gate::Passed(s) = &g[3] else {
            panic!("{g:?}")
        };
        assert_eq!((s.probes, s.successes, s.passed), (4, 2, true));
        assert_eq!(s.started_at, Some(Time(at(0))));
    }

    #[test]
    fn fails_only_past_the_timeout_from_the_first_probe_on_a_miss() {
        let g = run(&hc(1), &[(0, false), (50, false), (60, false)]);
        assert!(matches!(g[1], Gate::Probing { .. }));
        let Gate::Failed { status, waited } = &g[2] else {
            panic!("{g:?}")
        };
        assert_eq!(*waited, Duration::from_secs(60));
        assert_eq!(status.last_result, "refused");
        // An answer past the timeout still passes.
        let g = run(&hc(1), &[(0, false), (70, true)]);
        assert!(matches!(g[1], Gate::Passed(_)));
    }

    #[test]
    fn without_a_probe_it_waits_for_the_next_one_and_records_nothing_new() {
        let before = HealthCheckStatus {
            last_probe_at: Some(Time(at(0))),
            probes: 1,
            ..HealthCheckStatus::default()
        };
        let g = decide(&hc(1), Some(&before), None, at(4));
        assert_eq!(
            g,
            Gate::Probing {
                status: before,
                requeue: Duration::from_secs(6)
            }
        );
    }

    #[tokio::test]
    async fn a_probe_connects_to_the_first_address_the_instance_reports() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let vmi = |ip: &str| -> VirtualMachineInstance {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "vm"},
                "spec": {},
                "status": {"interfaces": [{"name": "x"}, {"name": "default", "ipAddress": ip}]},
            }))
            .unwrap()
        };
        let mut h = hc(1);
        h.tcp = Some(ferry_crds::TcpProbe { port });
        let ok = probe(&h, Some(&vmi("127.0.0.1"))).await;
        assert!(ok.ok, "{ok:?}");
        drop(listener);
        let refused = probe(&h, Some(&vmi("127.0.0.1"))).await;
        assert!(
            !refused.ok && refused.said.contains("127.0.0.1"),
            "{refused:?}"
        );
        let none = probe(&h, None).await;
        assert!(!none.ok && none.said.contains("no address"), "{none:?}");
    }
}
