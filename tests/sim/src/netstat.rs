//! What virt-handler writes in a VMI's `status.interfaces`: the domain's interfaces merged with
//! what the guest agent says of the guest's (KubeVirt v1.8.3). Pure.
//!
//! * The guest agent's answer: virt-launcher's agent poller asks libvirt for the guest's
//!   interfaces (`virDomainGetGuestInfo` with `DOMAIN_GUEST_INFO_INTERFACES`,
//!   `pkg/virt-launcher/virtwrap/agent-poller/agent_poller.go`), which asks the agent
//!   `guest-network-get-interfaces` and merges an alias (`eth0:1`) into its interface
//!   (`qemuAgentGetInterfaceAddresses`, libvirt's `src/qemu/qemu_agent.c`); `convertToInterfaces`
//!   leaves out `lo` and takes the first IPv4 address (else the first) as the interface's IP.
//! * The merge: `NetStat.UpdateStatus` (`pkg/network/setup/netstat.go`): each domain interface
//!   (name, MAC, `infoSource: domain`, its queues, link `up`); the pod's addresses from
//!   virt-handler's pod interface cache (none here: the sim's launcher pods have no network
//!   namespace and no IP); the agent's interface with the same MAC adds the guest's name and
//!   addresses (`infoSource: domain, guest-agent`; a masquerade interface without link-local
//!   addresses), one the domain lacks is added (`guest-agent`, at most 10); the pod network's
//!   interface first; multus' and virt-controller's `podInterfaceName` kept from the status
//!   before. Without the agent's answer the interfaces are the domain's alone.
//! * The pod's address: a launcher pod of this node gets a loopback address of its own
//!   ([`pod_ip`]), which the sim writes in the pod's `status.podIP` as the kubelet would and on
//!   the pod network's interface of an instance whose guest is not real (as virt-handler writes
//!   the pod's addresses on a masquerade interface). Nothing listens there unless a test does:
//!   that test plays the guest's application (a health check's port).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde_json::Value;

use crate::domain::Nic;
use crate::kubevirt::NetworkInterface;

/// `netvmispec.InfoSourceDomain`, `InfoSourceGuestAgent`, `InfoSourceMultusStatus`
/// (`pkg/network/vmispec/infosource.go`).
pub const DOMAIN: &str = "domain";
pub const GUEST_AGENT: &str = "guest-agent";
pub const MULTUS_STATUS: &str = "multus-status";
const SEPARATOR: &str = ", ";

/// One interface the guest agent reported (`api.InterfaceStatus`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuestInterface {
    /// The guest's name, `enp1s0`.
    pub name: String,
    pub mac: String,
    /// The first IPv4 address, else the first.
    pub ip: String,
    pub ips: Vec<String>,
}

/// The interfaces in a `guest-network-get-interfaces` answer, as virt-launcher stores them;
/// `None` when the answer is not a list of them (libvirt's call fails: nothing is stored, the
/// last answer stands).
pub fn guest_interfaces(answer: &Value) -> Option<Vec<GuestInterface>> {
    // In the agent's order; each with its first IPv4 address.
    let mut merged: Vec<(GuestInterface, Option<String>)> = Vec::new();
    for iface in answer.get("return")?.as_array()? {
        let name = iface.get("name")?.as_str()?;
        // An alias `<ifname>:<alias>` is its interface's.
        let base = name.split(':').next().unwrap_or(name);
        let at = match merged.iter().position(|(g, _)| g.name == base) {
            Some(at) => at,
            None => {
                let hw = iface.get("hardware-address").and_then(Value::as_str);
                let g = GuestInterface {
                    name: base.to_owned(),
                    mac: hw.unwrap_or_default().to_owned(),
                    ..GuestInterface::default()
                };
                merged.push((g, None));
                merged.len() - 1
            }
        };
        let Some(addrs) = iface.get("ip-addresses") else {
            continue;
        };
        let (g, v4) = &mut merged[at];
        for a in addrs.as_array()? {
            let kind = a.get("ip-address-type")?.as_str()?;
            if !matches!(kind, "ipv4" | "ipv6") || a.get("prefix").is_none() {
                return None;
            }
            let addr = a.get("ip-address")?.as_str()?.to_owned();
            if kind == "ipv4" && v4.is_none() {
                *v4 = Some(addr.clone());
            }
            g.ips.push(addr);
        }
    }
    Some(
        merged
            .into_iter()
            .filter(|(g, _)| g.name != "lo")
            .map(|(mut g, v4)| {
                g.ip = v4.or_else(|| g.ips.first().cloned()).unwrap_or_default();
                g
            })
            .collect(),
    )
}

/// The launcher pod `uid`'s address: a loopback address of its own (in 127.0.0.0/8, which
/// Linux routes to `lo` whole), the same for the pod whenever it is asked. Pure.
pub fn pod_ip(uid: &str) -> String {
    // FNV-1a: stable across runs and builds, unlike the standard library's hasher.
    let h = uid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!(
        "127.{}.{}.{}",
        1 + h % 254,
        (h >> 8) % 256,
        1 + (h >> 16) % 254
    )
}

/// `status.interfaces` of a VMI whose domain has `domain` (its pod network `pod_network`), the
/// guest agent having reported `guest` (empty: no answer), the status holding `previous`.
pub fn interfaces(
    domain: &[Nic],
    pod_network: Option<&str>,
    guest: &[GuestInterface],
    previous: &[NetworkInterface],
) -> Vec<NetworkInterface> {
    let multus: Vec<&NetworkInterface> = previous
        .iter()
        .filter(|i| contains_info_source(&i.info_source, MULTUS_STATUS))
        .collect();
    // `ifacesStatusFromDomainInterfaces`.
    let mut out: Vec<NetworkInterface> = domain
        .iter()
        .map(|n| NetworkInterface {
            name: n.name.clone(),
            mac: n.mac.clone(),
            info_source: DOMAIN.into(),
            queue_count: i32::try_from(n.queues).unwrap_or(i32::MAX),
            link_state: "up".into(),
            ..NetworkInterface::default()
        })
        .collect();
    from_guest_agent(&mut out, domain, guest);
    if let Some(primary) = pod_network {
        // `restorePrimaryIfaceStatus`, `movePrimaryIfaceStatusToFront`.
        if !out.iter().any(|i| i.name == primary) && previous.iter().any(|i| i.name == primary) {
            out.insert(
                0,
                NetworkInterface {
                    name: primary.to_owned(),
                    ..NetworkInterface::default()
                },
            );
        }
        if let Some(at) = out.iter().position(|i| i.name == primary) {
            let p = out.remove(at);
            out.insert(0, p);
        }
    }
    // `ifacesStatusFromMultus` (the spec's interfaces: the domain's here).
    for m in multus {
        match out.iter_mut().find(|i| i.name == m.name) {
            Some(i) => i.info_source = add_info_source(&i.info_source, MULTUS_STATUS),
            None if domain.iter().any(|n| n.name == m.name) => out.push(NetworkInterface {
                name: m.name.clone(),
                info_source: MULTUS_STATUS.into(),
                ..NetworkInterface::default()
            }),
            None => {}
        }
    }
    // `restorePodIfaceNames`.
    let pod_names: BTreeMap<&str, &str> = previous
        .iter()
        .filter(|i| !i.name.is_empty())
        .map(|i| (i.name.as_str(), i.pod_interface_name.as_str()))
        .collect();
    for i in out.iter_mut().filter(|i| !i.name.is_empty()) {
        i.pod_interface_name = pod_names
            .get(i.name.as_str())
            .copied()
            .unwrap_or_default()
            .to_owned();
    }
    out
}

/// `ifacesStatusFromGuestAgent`: each of the agent's interfaces onto the domain's with its MAC,
/// or added (at most 10 the domain lacks).
fn from_guest_agent(out: &mut Vec<NetworkInterface>, domain: &[Nic], guest: &[GuestInterface]) {
    const GUEST_ONLY_LIMIT: usize = 10;
    let mut guest_only = 0;
    for g in guest {
        if let Some(status) = out.iter_mut().find(|i| i.mac == g.mac) {
            let masquerade = domain.iter().any(|n| n.name == status.name && n.masquerade);
            // With masquerade, the guest's link-local addresses are not reachable from the pod.
            let ips: Vec<String> = g
                .ips
                .iter()
                .filter(|a| !masquerade || a.parse::<IpAddr>().is_ok_and(|ip| !link_local(ip)))
                .cloned()
                .collect();
            with_guest_agent_data(status, &g.name, &ips);
            // An interface without the guest's name came merged from an old virt-launcher.
            if !g.name.is_empty() {
                status.info_source = format!("{DOMAIN}{SEPARATOR}{GUEST_AGENT}");
            }
        } else if guest_only < GUEST_ONLY_LIMIT {
            guest_only += 1;
            out.push(NetworkInterface {
                mac: g.mac.clone(),
                ip: g.ip.clone(),
                ips: g.ips.clone(),
                interface_name: g.name.clone(),
                info_source: GUEST_AGENT.into(),
                ..NetworkInterface::default()
            });
        }
    }
}

/// `updateVMIIfaceStatusWithGuestAgentData`: the guest's name; per family, the addresses the
/// status had unless it had none or the agent reports none; IPv4 first, the first as the IP.
fn with_guest_agent_data(status: &mut NetworkInterface, name: &str, ips: &[String]) {
    status.interface_name = name.to_owned();
    let (had4, had6) = by_family(&status.ips);
    let (ga4, ga6) = by_family(ips);
    let v4 = if had4.is_empty() || ga4.is_empty() {
        ga4
    } else {
        had4
    };
    let v6 = if had6.is_empty() || ga6.is_empty() {
        ga6
    } else {
        had6
    };
    status.ips = v4.into_iter().chain(v6).collect();
    status.ip = status.ips.first().cloned().unwrap_or_default();
}

/// `splitIPByFamiliy`: IPv4 (an IPv4-mapped address too, as Go's `To4` has it) and IPv6; what
/// does not parse is dropped.
fn by_family(ips: &[String]) -> (Vec<String>, Vec<String>) {
    let mut v4 = vec![];
    let mut v6 = vec![];
    for a in ips {
        match a.parse::<IpAddr>() {
            Ok(IpAddr::V4(_)) => v4.push(a.clone()),
            Ok(IpAddr::V6(ip)) if ip.to_ipv4_mapped().is_some() => v4.push(a.clone()),
            Ok(IpAddr::V6(_)) => v6.push(a.clone()),
            Err(_) => {}
        }
    }
    (v4, v6)
}

/// Go's `netip.Addr.IsLinkLocalUnicast`: 169.254/16, fe80::/10 (an IPv4-mapped address as its
/// IPv4).
fn link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.is_link_local(),
            None => v6.is_unicast_link_local(),
        },
    }
}

/// `ContainsInfoSource`.
fn contains_info_source(sources: &str, name: &str) -> bool {
    sources.split(SEPARATOR).any(|s| s == name)
}

/// `AddInfoSource`.
fn add_info_source(sources: &str, name: &str) -> String {
    if contains_info_source(sources, name) {
        return sources.to_owned();
    }
    let mut all: Vec<&str> = if sources.is_empty() {
        vec![]
    } else {
        sources.split(SEPARATOR).collect()
    };
    all.push(name);
    all.join(SEPARATOR)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn nic(name: &str, mac: &str, masquerade: bool) -> Nic {
        Nic {
            name: name.into(),
            model: "virtio".into(),
            mac: mac.into(),
            queues: 1,
            masquerade,
        }
    }

    /// A Debian guest's answer: loopback, its NIC (an alias on it), and a bridge of its own.
    fn answer() -> Value {
        json!({"return": [
            {"name": "lo", "hardware-address": "00:00:00:00:00:00", "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
                {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128}]},
            {"name": "enp1s0", "hardware-address": "00:0c:29:32:64:63", "ip-addresses": [
                {"ip-address-type": "ipv6", "ip-address": "fe80::20c:29ff:fe32:6463", "prefix": 64},
                {"ip-address-type": "ipv4", "ip-address": "10.0.2.15", "prefix": 24}],
             "statistics": {"rx-bytes": 0}},
            {"name": "enp1s0:1", "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "10.0.2.16", "prefix": 24}]},
            {"name": "docker0", "hardware-address": "02:42:ac:11:00:01"}
        ]})
    }

    #[test]
    fn the_agents_answer_is_read_as_libvirt_and_virt_launcher_read_it() {
        let g = guest_interfaces(&answer()).unwrap();
        assert_eq!(
            g.len(),
            2,
            "no loopback; the alias is its interface's: {g:?}"
        );
        assert_eq!(g[0].name, "enp1s0");
        assert_eq!(g[0].mac, "00:0c:29:32:64:63");
        assert_eq!(g[0].ip, "10.0.2.15", "IPv4 preferred");
        assert_eq!(
            g[0].ips,
            ["fe80::20c:29ff:fe32:6463", "10.0.2.15", "10.0.2.16"]
        );
        assert_eq!((g[1].name.as_str(), g[1].ip.as_str()), ("docker0", ""));
        // An error, or an entry libvirt refuses: nothing stored.
        assert_eq!(
            guest_interfaces(&json!({"error": {"class": "CommandNotFound"}})),
            None
        );
        assert_eq!(
            guest_interfaces(&json!({"return": [{"hardware-address": "x"}]})),
            None
        );
        let odd = json!({"return": [{"name": "e", "ip-addresses": [{"ip-address-type": "ipx", "ip-address": "1", "prefix": 1}]}]});
        assert_eq!(guest_interfaces(&odd), None);
        assert_eq!(guest_interfaces(&json!({"return": []})), Some(vec![]));
    }

    #[test]
    fn without_the_agent_the_interfaces_are_the_domains() {
        // virt-controller's entry for the pod network, before virt-handler's.
        let before = [NetworkInterface {
            name: "net-0".into(),
            pod_interface_name: "eth0".into(),
            ..NetworkInterface::default()
        }];
        let s = interfaces(
            &[nic("net-0", "00:0c:29:32:64:63", true)],
            Some("net-0"),
            &[],
            &before,
        );
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!([{"name": "net-0", "mac": "00:0c:29:32:64:63", "infoSource": "domain",
                    "queueCount": 1, "linkState": "up", "podInterfaceName": "eth0"}])
        );
    }

    #[test]
    fn the_agents_interface_with_the_domains_mac_gives_the_guests_name_and_addresses() {
        let g = guest_interfaces(&answer()).unwrap();
        let domain = [
            nic("net-1", "02:00:00:00:00:01", false),
            nic("net-0", "00:0c:29:32:64:63", true),
        ];
        let s = interfaces(&domain, Some("net-0"), &g, &[]);
        assert_eq!(s.len(), 3, "{s:?}");
        // The pod network's first; masquerade: no link-local address.
        assert_eq!(s[0].name, "net-0");
        assert_eq!(s[0].interface_name, "enp1s0");
        assert_eq!(s[0].info_source, "domain, guest-agent");
        assert_eq!(s[0].ips, ["10.0.2.15", "10.0.2.16"]);
        assert_eq!(s[0].ip, "10.0.2.15");
        // No guest interface with its MAC: the domain's alone.
        assert_eq!(
            (
                s[1].name.as_str(),
                s[1].info_source.as_str(),
                s[1].interface_name.as_str()
            ),
            ("net-1", "domain", "")
        );
        // The guest's own bridge, no spec name.
        assert_eq!(
            (
                s[2].name.as_str(),
                s[2].interface_name.as_str(),
                s[2].info_source.as_str()
            ),
            ("", "docker0", "guest-agent")
        );
        assert_eq!(s[2].mac, "02:42:ac:11:00:01");
    }

    #[test]
    fn a_bridged_interface_keeps_link_local_addresses_and_ipv4_comes_first() {
        let g = [GuestInterface {
            name: "enp1s0".into(),
            mac: "m".into(),
            ip: "fe80::1".into(),
            ips: vec!["fe80::1".into(), "10.0.2.15".into(), "not-an-ip".into()],
        }];
        let s = interfaces(&[nic("n", "m", false)], None, &g, &[]);
        assert_eq!(s[0].ips, ["10.0.2.15", "fe80::1"]);
        assert_eq!(s[0].ip, "10.0.2.15");
        // Only link-local on a masquerade interface: no address at all.
        let g = [GuestInterface {
            ips: vec!["fe80::1".into()],
            ..g[0].clone()
        }];
        let s = interfaces(&[nic("n", "m", true)], None, &g, &[]);
        assert!(s[0].ips.is_empty() && s[0].ip.is_empty(), "{s:?}");
        assert_eq!(s[0].interface_name, "enp1s0");
    }

    #[test]
    fn at_most_ten_interfaces_only_the_guest_has() {
        let g: Vec<GuestInterface> = (0..12)
            .map(|i| GuestInterface {
                name: format!("veth{i}"),
                mac: format!("02:00:00:00:00:{i:02x}"),
                ..GuestInterface::default()
            })
            .collect();
        let s = interfaces(&[nic("net-0", "m", true)], Some("net-0"), &g, &[]);
        assert_eq!(s.len(), 11);
    }

    #[test]
    fn the_primary_and_multus_entries_of_the_status_before_are_kept() {
        let before = [
            NetworkInterface {
                name: "pod".into(),
                pod_interface_name: "eth0".into(),
                ..NetworkInterface::default()
            },
            NetworkInterface {
                name: "net-1".into(),
                info_source: "domain, multus-status".into(),
                pod_interface_name: "pod16367aacb67".into(),
                ..NetworkInterface::default()
            },
        ];
        // The pod network's interface is not in the domain (absent): its name stays, first.
        let s = interfaces(&[nic("net-1", "m1", false)], Some("pod"), &[], &before);
        assert_eq!(s[0].name, "pod");
        assert_eq!(s[0].pod_interface_name, "eth0");
        assert_eq!(s[1].info_source, "domain, multus-status");
        assert_eq!(s[1].pod_interface_name, "pod16367aacb67");
        assert_eq!(add_info_source("", DOMAIN), "domain");
    }
}
