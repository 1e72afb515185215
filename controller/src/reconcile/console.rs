//! The migrated guest's serial console, as KubeVirt keeps it: the `guest-console-log` container
//! of the instance's virt-launcher pod (virt-controller adds it unless the cluster or the VM
//! turns serial console logging off; `pkg/virt-controller/services/serialconsolelog.go`),
//! read through `pods/log`. Read while a running guest keeps ferry waiting, so that a guest that
//! says it cannot boot fails at once instead of at the end of its readiness timeout, and when a
//! guest failed its readiness check, so that the failure says what the guest said.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, LogParams};

use super::io::Io;
use crate::apis::kubevirt::VirtualMachineInstance;

/// The launcher's container that tails serial port 0.
pub const CONTAINER: &str = "guest-console-log";
/// How many of the console's last lines a failure carries.
pub const LINES: usize = 15;

/// What a guest's console says when the guest will not come up by itself, with whose words
/// they are: a line that holds one of these ends the wait for readiness at once.
const CANNOT_BOOT: &[(&str, &str)] = &[
    // initramfs-tools (Debian, Ubuntu), scripts/local: the root device never appeared (a
    // VMware-only initramfs on virtio or SATA); it drops to the `(initramfs)` shell.
    (
        "Gave up waiting for root file system device",
        "initramfs-tools",
    ),
    // Linux, kernel/panic.c: nothing after it runs (no init, a root that does not mount).
    ("Kernel panic - not syncing", "the kernel"),
    // systemd's emergency.target (dracut's initramfs on RHEL lands there too when its root
    // never appears): no qemu-guest-agent, no network, a root password prompt.
    ("You are in emergency mode", "systemd"),
    // SeaBIOS, src/boot.c: no disk it could boot from (it retries forever).
    ("No bootable device", "SeaBIOS"),
];

/// The first of `lines` that says the guest cannot boot ([`CANNOT_BOOT`]), and whose words
/// those are. Pure.
pub fn cannot_boot(lines: &[String]) -> Option<(&str, &'static str)> {
    lines.iter().find_map(|l| {
        CANNOT_BOOT
            .iter()
            .find(|(words, _)| l.contains(words))
            .map(|(_, whose)| (l.trim(), *whose))
    })
}

/// The last `n` lines of a console's output, as words a status may carry: escape sequences
/// and control characters dropped, carriage returns ending lines, blank lines left out. Pure.
pub fn last_lines(raw: &str, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // CSI (ESC [ … final byte) and other two-character escapes.
            '\u{1b}' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&d) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            '\n' | '\r' => lines.push(std::mem::take(&mut line)),
            '\t' => line.push(' '),
            c if c.is_control() => {}
            c => line.push(c),
        }
    }
    lines.push(line);
    let kept: Vec<String> = lines
        .into_iter()
        .map(|l| l.trim_end().to_owned())
        .filter(|l| !l.trim().is_empty())
        .collect();
    kept[kept.len().saturating_sub(n)..].to_vec()
}

/// Which of `pods` is the launcher of `vmi`: one the instance's status names active (by uid)
/// and that the instance controls. The label that found them and the owner reference are
/// anyone's to write who may create pods there; the VMI's status is KubeVirt's. Pure.
pub fn launcher<'p>(vmi: &VirtualMachineInstance, pods: &'p [Pod]) -> Option<&'p Pod> {
    let uid = vmi.metadata.uid.as_deref().unwrap_or_default();
    let active = vmi.status.as_ref().map(|s| &s.active_pods)?;
    pods.iter().find(|p| {
        p.metadata
            .uid
            .as_ref()
            .is_some_and(|u| active.contains_key(u))
            && p.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
    })
}

/// The console's last lines of the instance `vmi` (ferry's, classified by the caller): from
/// its launcher pod ([`launcher`]). `Err` says why they could not be read.
pub async fn read(io: Io<'_>, vmi: &VirtualMachineInstance) -> Result<Vec<String>, String> {
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    let pods = io
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("kubevirt.io/created-by={uid}")))
        .await
        .map_err(|e| format!("listing the instance's pods: {e}"))?;
    let launcher =
        launcher(vmi, &pods.items).ok_or("the instance names no active virt-launcher pod")?;
    let params = LogParams {
        container: Some(CONTAINER.into()),
        tail_lines: Some(i64::try_from(LINES * 4).unwrap_or(60)),
        limit_bytes: Some(16 * 1024),
        ..LogParams::default()
    };
    let text = io
        .api::<Pod>()
        .logs(&launcher.name_any(), &params)
        .await
        .map_err(|e| format!("reading {}'s {CONTAINER}: {e}", launcher.name_any()))?;
    Ok(last_lines(&text, LINES))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, owner: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("virt-launcher-{uid}"), "uid": uid,
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance", "name": "vm", "uid": owner,
                    "controller": true}]}
        }))
        .unwrap()
    }

    fn vmi(active: &[&str]) -> VirtualMachineInstance {
        let pods: serde_json::Map<String, serde_json::Value> = active
            .iter()
            .map(|u| ((*u).to_owned(), serde_json::json!("node-0")))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm", "uid": "vmi-1"},
            "spec": {}, "status": {"phase": "Running", "activePods": pods}
        }))
        .unwrap()
    }

    #[test]
    fn the_launcher_is_the_pod_the_instance_names_not_one_that_claims_it() {
        // Someone's pod, labelled and owned as a launcher would be: not named by the instance.
        let forged = pod("p-forged", "vmi-1");
        let real = pod("p-real", "vmi-1");
        let pods = [forged.clone(), real.clone()];
        let found = launcher(&vmi(&["p-real"]), &pods).unwrap();
        assert_eq!(found.metadata.uid.as_deref(), Some("p-real"));
        assert!(launcher(&vmi(&[]), &[forged]).is_none());
        // Named active, but controlled by another instance.
        assert!(launcher(&vmi(&["p-other"]), &[pod("p-other", "vmi-2")]).is_none());
    }

    #[test]
    fn a_console_that_says_the_guest_cannot_boot_is_told_from_one_still_booting() {
        let lines = |text: &str| last_lines(text, LINES);
        let stuck = lines(
            "Loading initial ramdisk ...\r\nBegin: Waiting for root file system ... done.\r\nGave up waiting for root file system device.  Common problems:\r\n - Boot args (cat /proc/cmdline)\r\n(initramfs) ",
        );
        assert_eq!(
            cannot_boot(&stuck),
            Some((
                "Gave up waiting for root file system device.  Common problems:",
                "initramfs-tools"
            ))
        );
        let panicked = lines(
            "[    2.1] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)",
        );
        assert_eq!(cannot_boot(&panicked).map(|(_, w)| w), Some("the kernel"));
        assert_eq!(
            cannot_boot(&lines(
                "You are in emergency mode. After logging in, type \"journalctl -xb\""
            ))
            .map(|(_, w)| w),
            Some("systemd")
        );
        assert_eq!(
            cannot_boot(&lines("No bootable device.  Retrying in 60 seconds.")).map(|(_, w)| w),
            Some("SeaBIOS")
        );
        // A guest on its way, slowly: waiting for its root is not giving up on it.
        let booting = lines(
            "SeaBIOS (version 1.16.2-debian-1.16.2-1)\r\nBooting from Hard Disk...\r\nBegin: Waiting for root file system ...\r\n[  OK  ] Reached target Multi-User System.",
        );
        assert_eq!(cannot_boot(&booting), None);
        assert_eq!(cannot_boot(&[]), None);
    }

    #[test]
    fn the_last_lines_are_kept_without_escapes_or_blank_lines() {
        let raw = "\u{1b}[2J\u{1b}[01;01HSeaBIOS\r\n\r\nBooting from Hard Disk...\r\nGave up waiting for root file system device.\r\n  - Check rootdelay=\r\n\u{7}(initramfs) ";
        assert_eq!(
            last_lines(raw, 3),
            [
                "Gave up waiting for root file system device.",
                "  - Check rootdelay=",
                "(initramfs)"
            ]
        );
        assert_eq!(last_lines(raw, 10)[0], "SeaBIOS");
        assert!(last_lines("", 5).is_empty());
    }
}
